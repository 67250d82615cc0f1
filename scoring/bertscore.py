"""BERTScore (Zhang et al. 2020) on ctgscore's loader and length batching.

For a candidate x̂ and a reference x, with contextual embeddings from layer `layer` of an
encoder, L2-normalised:

    P = sum_{j in x̂} w(x̂_j) max_{i in x} x_i·x̂_j / sum_j w(x̂_j)              (Eq. 3/4)
    R = sum_{i in x} w(x_i) max_{j in x̂} x_i·x̂_j / sum_i w(x_i)
    F = 2PR / (P + R)

over every token of each sequence, special tokens included in the maxima. Weights w are 1
(the start and end tokens 0), or idf weights idf(t) = log((M + 1) / (df(t) + 1)) over M
reference documents (a token seen in none gets log(M + 1)), computed once with `idf_table` and
passed as a file, so a row's score never depends on the rows scored beside it. With several
references P, R and F each take their maximum over the references, as the bert-score package
does. Baseline rescaling maps s to (s - b) / (1 - b) with b the row of a baseline file (columns
LAYER, P, R, F; the row of the layer used). Sentences are tokenised as bert-score does (the
stripped text with special tokens, a leading space for byte-level BPE tokenizers, truncated to
the tokenizer's maximum length) so the numbers equal the package on the same model and layer.

Models load through `scoring.models` (hub id, folder, `s3://`, safetensors only); encoder-
decoder models use their encoder; layers above `layer` are dropped. Unique sentences are
embedded once, longest first, in length buckets of at most `token_budget` padded tokens: the
texts together, then the references in chunks of 2 x `token_budget` tokens, each chunk matched
in similarity blocks of at most SIMILARITY_CELLS cells and dropped, so one row with 1,000 long
references costs that row's time, not a worker's memory.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import torch

from scoring.engine import Ragged, budget_batches, run_splitting_on_oom
from scoring.errors import UsageError
from scoring.local_files import refuse_device
from scoring.metric import RowMetric
from scoring.model_limits import limits_for
from scoring.models import file_digest, load_pretrained, load_tokenizer, resolve_device, resolve_model
from scoring.params import check_model_args
from scoring.parsed_tokens import ParsedTokens, joined, kept_for
from scoring.signature import Signature, library_versions
from scoring.text_encoding import tokenize_heads

VERSION = "1"
# an encoder pass holds no decoder state: larger batches than the likelihood engine's default
# keep CPU matrix products efficient while length sorting keeps padding low
BERTSCORE_TOKEN_BUDGET = 16384
# no sentence in an encoder batch is padded by more than this fraction of the batch's width:
# CPU time follows padded tokens (and attention their square), so length buckets beat full budgets
MAX_PADDING = 0.1
# references are embedded and matched in chunks of at most this many token budgets' worth of
# tokens, so a row with 1,000 long references never holds all their embeddings at once
REFERENCE_CHUNK_BUDGETS = 2
# a candidate's similarity matrix against its references is built in blocks of at most this many
# (candidate token, reference token) cells: 16 MiB of float32 (one text x 1,000 references of
# 512 tokens would be 1 GiB in one piece)
SIMILARITY_CELLS = 1 << 22
ENCODE_SENTENCES = 64
COLUMNS = ("bertscore_p", "bertscore_r", "bertscore_f")
ZERO_WEIGHT = ("every token of the text or of a reference weighs 0 (only special tokens such as </s>, "
               "or tokens of idf 0): P or R would be 0/0")


def _layer_list(model) -> tuple[Any, str]:
    """The module holding the encoder's layer list and its attribute name."""
    for owner_path, name in (("encoder", "layer"), ("", "layers"), ("transformer", "layer"), ("", "layer"), ("encoder", "block")):
        owner = model
        for part in filter(None, owner_path.split(".")):
            owner = getattr(owner, part, None)
        if owner is not None and isinstance(getattr(owner, name, None), torch.nn.ModuleList):
            return owner, name
    raise UsageError(f"model {type(model).__name__}: cannot find its layer list to pick a layer from")


def _byte_level(tokenizer) -> bool:
    """Whether bert-score would give this tokenizer a leading space (GPT-2 / RoBERTa BPE)."""
    from transformers import GPT2Tokenizer, RobertaTokenizer

    return isinstance(tokenizer, (GPT2Tokenizer, RobertaTokenizer))


def encode_sentences(tokenizer, texts: Sequence[str], max_length: int) -> tuple[list[list[int]], list[bool]]:
    """Token ids with special tokens, as bert-score encodes a sentence (the stripped text,
    right-truncated to `max_length` tokens with the special tokens kept), plus truncation
    flags. Each text's head is tokenised once (`tokenize_heads`), in one batched call;
    truncation cuts the content ids."""
    kwargs = {"add_prefix_space": True} if _byte_level(tokenizer) else {}
    prefix, suffix = _special_tokens_around(tokenizer, kwargs)
    stripped = [text.strip() for text in texts]
    nonempty = [text for text in stripped if text]
    room = max(max_length - len(prefix) - len(suffix), 0)
    encoded, _ = tokenize_heads(lambda heads: tokenizer(heads, add_special_tokens=False, verbose=False, **kwargs)["input_ids"],
                                nonempty, room)
    content = iter(encoded)
    out, truncated = [], []
    for text in stripped:
        ids = next(content) if text else []
        out.append(prefix + ids[:room] + suffix)
        truncated.append(len(ids) > room)
    return out, truncated


def _special_tokens_around(tokenizer, kwargs) -> tuple[list[int], list[int]]:
    """The special tokens a single sentence gets before and after its content ids."""
    bare = tokenizer.encode("a", add_special_tokens=False, **kwargs)
    full = tokenizer.encode("a", add_special_tokens=True, **kwargs)
    for start in range(len(full) - len(bare) + 1):
        if full[start : start + len(bare)] == bare:
            return full[:start], full[start + len(bare) :]
    raise UsageError(f"tokenizer {type(tokenizer).__name__}: cannot locate a sentence's ids among its special tokens")


def idf_table(tokenizer, references: Sequence[str], max_length: int | None = None) -> dict[str, float]:
    """idf(t) = log((M + 1) / (df(t) + 1)) over M reference documents; key "default" is the
    weight of a token in none of them, log(M + 1)."""
    limit = int(max_length or min(int(tokenizer.model_max_length), 100_000))
    ids, _ = encode_sentences(tokenizer, references, limit)
    counts: dict[int, int] = {}
    for sentence in ids:
        for token in set(sentence):
            counts[token] = counts.get(token, 0) + 1
    documents = len(references)
    table = {str(token): math.log((documents + 1) / (count + 1)) for token, count in sorted(counts.items())}
    table["default"] = math.log(documents + 1)
    return table


class BERTScorer:
    """`BERTScorer(model, layer).score(candidates, references) -> (P, R, F)` per candidate,
    references ragged (a list per candidate); the model is loaded once."""

    def __init__(self, model: str = "roberta-large", layer: int | None = None, idf: str | dict | None = None,
                 baseline: str | None = None, device: str = "cpu", dtype: str = "float32", max_length: int | None = None,
                 token_budget: int = BERTSCORE_TOKEN_BUDGET, revision: str | None = None, cache_dir: str | None = None):
        from transformers import AutoModel

        check_model_args(dtype, device, token_budget, max_length)
        self.source = resolve_model(model, revision=revision, cache_dir=cache_dir)
        self.tokenizer = load_tokenizer(self.source)
        self.limits = limits_for(self.source)  # embedding and position sizes, from the config
        self.limits.check_max_length(max_length)
        loaded = load_pretrained(AutoModel, self.source, dtype=dtype, device=device, unused=("pooler.", "lm_head."))
        encoder = loaded.get_encoder() if getattr(loaded.config, "is_encoder_decoder", False) else loaded
        owner, name = _layer_list(encoder)
        layers = getattr(owner, name)
        self.layer = len(layers) if layer is None else int(layer)
        if not 0 <= self.layer <= len(layers):
            raise UsageError(f"layer: {layer} is outside 0..{len(layers)} for {model}")
        setattr(owner, name, torch.nn.ModuleList(list(layers)[: self.layer]))
        self.model = encoder
        self.device = resolve_device(device)
        self.dtype = dtype
        self.token_budget = int(token_budget)
        self.reference_chunk_tokens = REFERENCE_CHUNK_BUDGETS * self.token_budget
        self.similarity_cells = SIMILARITY_CELLS
        self.max_length = int(max_length or min(int(self.tokenizer.model_max_length), self.limits.positions or 100_000, 100_000))
        self.idf_source = idf
        self.idf = self._load_idf(idf)
        self.baseline_file = baseline
        self.baseline = self._load_baseline(baseline) if baseline else None

    def _load_idf(self, idf) -> dict[int, float] | None:
        if idf is None or idf is False:
            return None
        if isinstance(idf, (str, bytes)) or hasattr(idf, "__fspath__"):
            refuse_device(idf, "idf: ")
            from scoring.json_files import UnreadableJson, read_json

            try:
                idf = read_json(idf)
            except UnreadableJson as exc:
                raise UsageError(f"idf: cannot read {idf} as a JSON idf table ({exc})") from None
            except OSError as exc:
                raise UsageError(f"idf: cannot read {idf} as a JSON idf table ({type(exc).__name__})") from exc
        if not isinstance(idf, dict) or "default" not in idf:
            raise UsageError("idf: expected a table {token id: weight, 'default': weight} (scoring.bertscore.idf_table)")
        table: dict[int, float] = {}
        for key, value in idf.items():
            # a token id (an int or its digits) and a finite weight: NaN or inf would reach every score
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise UsageError(f"idf: the weight of {str(key)[:40]!r} must be a finite number, got {str(value)[:40]!r}")
            if key == "default":
                table[-1] = float(value)
            elif isinstance(key, int) and not isinstance(key, bool) or isinstance(key, str) and key.isascii() and key.isdigit():
                table[int(key)] = float(value)
            else:
                raise UsageError(f"idf: key {str(key)[:40]!r} is no token id (a whole number) nor 'default'")
        return table

    def _load_baseline(self, path: str) -> tuple[float, float, float]:
        import csv

        refuse_device(path, "baseline: ")
        try:
            with open(path, encoding="utf-8") as handle:
                rows = list(csv.DictReader(handle))
            row = rows[self.layer]
            values = float(row["P"]), float(row["R"]), float(row["F"])
        except (OSError, KeyError, IndexError, ValueError, TypeError, csv.Error) as exc:
            raise UsageError(f"baseline: {path} has no P,R,F row for layer {self.layer} ({type(exc).__name__}: {exc})") from exc
        if not all(math.isfinite(value) for value in values):  # a NaN baseline would rescale every score to NaN
            raise UsageError(f"baseline: {path} layer {self.layer}: P, R and F must be finite numbers, got {values}")
        return values

    def _weights(self, ids: list[int]) -> torch.Tensor:
        if self.idf is None:
            special = {self.tokenizer.cls_token_id, self.tokenizer.sep_token_id}
            return torch.tensor([0.0 if t in special else 1.0 for t in ids])
        default = self.idf[-1]
        return torch.tensor([self.idf.get(t, default) for t in ids])

    def encode(self, sentences: Sequence[str]) -> tuple[list[list[int]], list[bool]]:
        """Token ids (bert-score's encoding, `encode_sentences`) and truncation flags, checked
        against the model's tables; ENCODE_SENTENCES sentences per tokenizer call, as the
        tokenizer's own output (offsets, tokens) for 1,000 long sentences would outweigh the ids."""
        ids: list[list[int]] = []
        truncated: list[bool] = []
        for start in range(0, len(sentences), ENCODE_SENTENCES):
            part_ids, part_truncated = encode_sentences(self.tokenizer, sentences[start : start + ENCODE_SENTENCES], self.max_length)
            ids += part_ids
            truncated += part_truncated
        self.limits.check_sequences(ids, "sentence")
        return ids, truncated

    @torch.inference_mode()
    def embed_ids(self, ids: Sequence[list[int]]) -> list[torch.Tensor]:
        """Normalised token embeddings per sentence. Sentences run longest first in batches of
        at most `token_budget` padded tokens in which no sentence is padded by more than
        MAX_PADDING of its batch's width."""
        embeddings: list[torch.Tensor | None] = [None] * len(ids)
        ragged = Ragged.from_lists(list(ids))
        lengths = ragged.lengths
        order = np.argsort(-lengths, kind="stable").tolist()
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0

        def run(batch: list[int]) -> None:
            input_ids, mask = ragged.padded(batch, pad, self.device)
            hidden = self.model(input_ids=input_ids, attention_mask=mask).last_hidden_state
            hidden = hidden.float()
            hidden = (hidden / hidden.norm(dim=-1, keepdim=True)).cpu()
            for row, index in enumerate(batch):
                embeddings[index] = hidden[row, : lengths[index]]

        for batch in budget_batches(lengths, order, self.token_budget, max_padding=MAX_PADDING):
            run_splitting_on_oom(batch, run)
        return embeddings  # type: ignore[return-value]

    def embed(self, sentences: Sequence[str]) -> tuple[list[torch.Tensor], list[torch.Tensor], list[bool]]:
        """Normalised token embeddings, token weights and truncation flags per sentence."""
        ids, truncated = self.encode(sentences)
        return self.embed_ids(ids), [self._weights(s) for s in ids], truncated

    def greedy(self, embedding: torch.Tensor, weight: torch.Tensor, references: Sequence[torch.Tensor],
               reference_weights: Sequence[torch.Tensor]) -> torch.Tensor:
        """[P, R, F] of one candidate (its embeddings and weights) against each reference, as
        rows of a [k, 3] tensor (module docstring). The references go in consecutive groups
        whose similarity matrix (candidate tokens x the group's tokens) holds at most
        `similarity_cells` cells (one reference at least); each group's maxima are taken
        within each reference's columns, so a reference's scores do not depend on its group."""
        rows, group, cells = [], [], 0
        for index, reference in enumerate(references):
            size = len(embedding) * len(reference)
            if group and cells + size > self.similarity_cells:
                rows.append(self._greedy_group(embedding, weight, [references[i] for i in group],
                                               [reference_weights[i] for i in group]))
                group, cells = [], 0
            group.append(index)
            cells += size
        rows.append(self._greedy_group(embedding, weight, [references[i] for i in group], [reference_weights[i] for i in group]))
        return torch.cat(rows)

    @staticmethod
    def _greedy_group(embedding, weight, references, reference_weights) -> torch.Tensor:
        """[P, R, F] against each of `references` from one similarity matrix against all of
        them side by side, then the maxima within each reference's columns."""
        lengths = [len(r) for r in references]
        sim = embedding @ torch.cat(list(references)).T
        best_per_candidate_token = torch.stack([block.amax(dim=1) for block in sim.split(lengths, dim=1)])
        precision = (best_per_candidate_token * weight).sum(dim=1) / weight.sum()
        weighted_best = sim.amax(dim=0) * torch.cat(list(reference_weights))
        recall = torch.stack([block.sum() for block in weighted_best.split(lengths)]) / torch.stack(
            [w.sum() for w in reference_weights])
        f = torch.nan_to_num(2 * precision * recall / (precision + recall), nan=0.0)
        return torch.stack([precision, recall, f], dim=1)

    def _reference_chunks(self, lengths: Sequence[int]) -> list[list[int]]:
        """Consecutive reference indices in chunks of at most `reference_chunk_tokens` tokens
        (one reference at least)."""
        chunks: list[list[int]] = []
        tokens = 0
        for index, length in enumerate(lengths):
            if not chunks or tokens + length > self.reference_chunk_tokens:
                chunks.append([])
                tokens = 0
            chunks[-1].append(index)
            tokens += length
        return chunks

    def score_with_flags(self, candidates: Sequence[str], references: Sequence[Sequence[str]]):
        """[(P, R, F)] per candidate (each the maximum over its references, rescaled when a
        baseline is set) and per-candidate truncation flags.

        Memory stays bounded whatever a row holds: the distinct candidates are embedded
        together, then the distinct references in chunks of at most `reference_chunk_tokens`
        tokens (each embedded once); each chunk is matched against the candidates of the rows
        that cite it, in similarity blocks of at most `similarity_cells` cells (`greedy`), and
        dropped. Each (candidate, reference) pair's P, R and F is kept, and each row takes its
        maxima once all its references are matched."""
        texts = list(dict.fromkeys(candidates))
        text_index = {text: i for i, text in enumerate(texts)}
        text_ids, text_truncated = self.encode(texts)
        text_embeddings = self.embed_ids(text_ids)
        text_weights = [self._weights(s) for s in text_ids]
        unique = list(dict.fromkeys(r for group in references for r in group))
        where = {text: i for i, text in enumerate(unique)}
        ref_ids, ref_truncated = self.encode(unique)
        cited_by: dict[int, list[tuple[int, int]]] = {}  # reference -> (row, position in the row's references)
        for row, group in enumerate(references):
            for position, reference in enumerate(group):
                cited_by.setdefault(where[reference], []).append((row, position))
        pair_scores: list[list[torch.Tensor | None]] = [[None] * len(group) for group in references]
        for chunk in self._reference_chunks([len(s) for s in ref_ids]):
            embeddings = dict(zip(chunk, self.embed_ids([ref_ids[i] for i in chunk])))
            weights = {reference: self._weights(ref_ids[reference]) for reference in chunk}
            by_row: dict[int, list[tuple[int, int]]] = {}
            for reference in chunk:
                for row, position in cited_by[reference]:
                    by_row.setdefault(row, []).append((position, reference))
            for row, pairs in by_row.items():
                candidate = text_index[candidates[row]]
                scores = self.greedy(text_embeddings[candidate], text_weights[candidate], [embeddings[r] for _, r in pairs],
                                     [weights[r] for _, r in pairs])
                for (position, _), values in zip(pairs, scores):
                    pair_scores[row][position] = values
            del embeddings, weights
        results, flags = [], []
        for row, (candidate, group) in enumerate(zip(candidates, references)):
            scores = torch.stack(pair_scores[row]).double()  # type: ignore[arg-type]
            best = scores.max(dim=0).values.tolist()
            if self.baseline is not None:
                best = [(value - b) / (1 - b) for value, b in zip(best, self.baseline)]
            results.append(tuple(best))
            flags.append(text_truncated[text_index[candidate]] or any(ref_truncated[where[r]] for r in group))
        return results, flags

    def score(self, candidates: Sequence[str], references: Sequence[Sequence[str]]) -> list[tuple[float, float, float]]:
        return self.score_with_flags(candidates, references)[0]

    def signature_params(self) -> dict[str, Any]:
        idf = "none"
        if self.idf is not None:
            idf = f"file:sha256:{file_digest(self.idf_source)}" if isinstance(self.idf_source, str) else "table"
        return {
            **self.source.identity(),
            "layer": self.layer,
            "idf": idf,
            "baseline": f"sha256:{file_digest(self.baseline_file)}" if self.baseline_file else "none",
            "dtype": self.dtype,
            "max_length": self.max_length,
            "tokenization": "bert-score",
            "batching": f"length-sorted,token_budget={self.token_budget},max_padding={MAX_PADDING}",
            **library_versions("torch", "transformers"),
        }


class BERTScoreMetric(RowMetric):
    """BERTScore of `text` against `references`: columns `bertscore_p`, `bertscore_r`,
    `bertscore_f`, each the best over the references (module docstring)."""

    name = "bertscore"
    required_columns = ("text", "references")
    output_columns = COLUMNS

    def __init__(self, model: str = "roberta-large", layer: int | None = None, idf: str | None = None,
                 baseline: str | None = None, dtype: str = "float32", device: str = "cpu", max_length: int | None = None,
                 token_budget: int = BERTSCORE_TOKEN_BUDGET, revision: str | None = None, cache_dir: str | None = None):
        self.scorer = BERTScorer(model, layer=layer, idf=idf, baseline=baseline, device=device, dtype=dtype,
                                 max_length=max_length, token_budget=token_budget, revision=revision, cache_dir=cache_dir)

    def signature(self) -> Signature:
        return Signature(self.name, VERSION, self.scorer.signature_params())

    def validate(self, row: dict[str, Any]) -> str | None:
        reason = super().validate(row)
        if reason is None and any(not isinstance(r, str) or not r.strip() for r in row["references"]):
            return "empty or null reference in 'references'"
        return reason

    def score_valid(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        scores, flags = self.scorer.score_with_flags([row["text"] for row in rows], [list(row["references"]) for row in rows])
        results = []
        for row, values, flag in zip(rows, scores, flags):
            if not all(math.isfinite(value) for value in values):
                # P or R is 0/0: every token of the text, or of a reference, weighs 0 (only special
                # tokens such as </s>, or tokens of idf 0); the bert-score package writes NaN and F 0
                results.append({"error": ZERO_WEIGHT})
                continue
            result: dict[str, Any] = dict(zip(COLUMNS, values))
            note = self.parsed_tokens.note([("text", [row["text"]]), ("references", row["references"])])
            warning = joined(f"truncated to max_length={self.scorer.max_length} tokens" if flag else None, note)
            if warning:
                result["warning"] = warning
            results.append(result)
        return results

    @property
    def parsed_tokens(self) -> ParsedTokens:
        """The special-token strings this metric's tokenizer parses in a text."""
        return kept_for(self, self.scorer.tokenizer)
