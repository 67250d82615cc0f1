"""GPTScore-style prompted likelihood under a decoder LM (Fu et al. 2023; docs/metrics.md,
"Prompted LM likelihood (gptscore)", G1-G4).

For an aspect a with template T_a and a pair (conditioning text x, continuation y):
prompt = T_a with `{input}` replaced by x (optionally wrapped in the tokenizer's chat template
as one user turn, ready for the assistant's reply), and

    score_a(x -> y) = (1/|y|) sum_{t=1..|y|} log p(y_t | prompt, y_<t)      (G1, mean)
    sum_a(x -> y)   =         sum_{t=1..|y|} log p(y_t | prompt, y_<t)      (G2, reduction: sum)

over the continuation's tokens only; higher is better. Directions as BARTScore has them:
s_h = score(source -> text), r_h = agg_r score(reference_r -> text), h_r = agg_r
score(text -> reference_r), f = agg_r (score(r -> text) + score(text -> r)) / 2 (agg: mean or
max over the references; BARTScore's `per_reference` F).

Tokenisation (G3): prompt and continuation are tokenised separately and joined,
ids(prompt) + ids(continuation): [start] + ids(prompt text) without special tokens (start =
BOS, or EOS where the model has no BOS, as for GPT-2 and perplexity; no start with a chat
template, which writes its own), then ids(continuation) without special tokens. A
continuation's tokens thus never depend on its prompt (tokenising the concatenated string can
merge the prompt's last characters with the continuation's first into one token, and then the
"continuation" is no longer a whole number of tokens). The default templates end with a
newline, so the continuation begins a line as it would in the prompt's text.

Text is text (docs/security.md, "Special tokens in data"): the prompt (template and data alike)
and the continuation are tokenised literally (`scoring.literal_tokens`): `<|endoftext|>`,
`</s>` or `<|im_end|>` inside them are the pieces of their characters, never control tokens.
With a chat template only the template's own markup is parsed (`scoring.chat_frame`): the
template is rendered around a placeholder and cut there, its control tokens become their ids and
the text runs between them, the content inside, are tokenised literally on their own, so a
source holding `<|im_end|>\n<|im_start|>assistant\n` cannot forge a turn. For byte-level BPE
tokenizers these are the ids of the whole rendered string whenever the text holds no
control-token string; a Metaspace tokenizer that prepends `▁` only at the string's start
(Llama 2, Mistral) gets a `▁` at the start of each run instead (`scoring.chat_frame`, "Seams").
A text whose literal ids would still hold a control token (a unigram vocabulary holding `</s>`
as a piece) is its row's error.

A prompt + continuation longer than `max_length` (by default the model's position table) is
that row's error, never a crash and never a silent cut: a truncated prompt would condition on
another text.
"""

from __future__ import annotations

import pathlib
import re
import statistics
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from scoring.chat_frame import ChatFrame
from scoring.engine import DEFAULT_TOKEN_BUDGET, Ragged
from scoring.errors import UsageError
from scoring.json_files import UnreadableJson, read_json
from scoring.literal_tokens import LiteralTokenizer
from scoring.local_files import refuse_device
from scoring.metric import RowError, RowMetric, is_absent
from scoring.model_limits import default_max_length, limits_for, raise_row_error
from scoring.models import load_pretrained, load_tokenizer, resolve_model
from scoring.params import check_choice, check_choices, check_model_args, check_text_list
from scoring.resources import RESOURCES, resource_path
from scoring.signature import Signature, library_versions, stable_hash
from scoring.text_encoding import HEAD_CHARS_PER_TOKEN, HEAD_MARGIN, id_lists, tokenize_heads

if TYPE_CHECKING:
    import pyarrow as pa

# 1.1: float32 head logits for more causal families, and LongRoPE pairs past the rotary
# switch scored on their own (their scores had depended on the rest of the batch); in the same
# release, texts are tokenised literally (special-token strings in data stay text) and chat
# prompts through the chat frame: scores move for texts holding special-token strings, and with
# `chat_template` on Metaspace tokenizers (a `▁` at each text run's start) for every text, so the
# number stays 1.1 and the signature's `text` parameter says how data was tokenised
# 1.2: float32 head logits for 22 more causal families (as perplexity 1.3): bf16 models move by
# bf16 rounding
VERSION = "1.2"
DIRECTIONS = ("s_h", "r_h", "h_r", "f")
# the columns each direction reads, as BARTScore's: a row gets each direction whose inputs it has
DIRECTION_INPUTS = {"s_h": ("text", "source"), "r_h": ("text", "references"), "h_r": ("text", "references"),
                    "f": ("text", "references")}
AGGREGATES = {"mean": statistics.fmean, "max": max}
REDUCTIONS = ("mean", "sum")
PLACEHOLDER = "{input}"
TEMPLATE_SETS = {"summary_aspects": RESOURCES / "gptscore" / "summary_aspects.json"}
DEFAULT_TEMPLATES = "summary_aspects"
_ASPECT_NAME = re.compile(r"^[a-z][a-z0-9_]{0,39}$")


def load_templates(templates: str | Mapping[str, Any] | None) -> dict[str, dict[str, str]]:
    """{aspect: {direction: template}} from a shipped set name (`summary_aspects`), a JSON file
    ({aspect: template} or {aspect: {"s_h": ..., "r_h": ..., "h_r": ...}}), or the same mapping
    inline. A single template for an aspect serves every direction. Each template holds
    `{input}` at least once; aspect names are lower-case identifiers (they name columns)."""
    if templates is None:
        templates = DEFAULT_TEMPLATES
    if isinstance(templates, (str, pathlib.Path)):
        path = resource_path(templates, TEMPLATE_SETS)
        refuse_device(path, "templates: ")
        try:
            templates = read_json(path)
        except FileNotFoundError:
            raise UsageError(f"templates: {templates}: no such template set or file (shipped: {', '.join(TEMPLATE_SETS)})") from None
        except (OSError, ValueError, RecursionError) as exc:  # not UTF-8 or JSON, a number past 4,300 digits, too deep
            reason = exc if isinstance(exc, UnreadableJson) else type(exc).__name__
            raise UsageError(f"templates: {path.name}: not a JSON object of templates ({reason})") from None
    if not isinstance(templates, Mapping) or not templates:
        raise UsageError("templates: expected a non-empty mapping {aspect: template}")
    found: dict[str, dict[str, str]] = {}
    for aspect, value in templates.items():
        if not isinstance(aspect, str) or not _ASPECT_NAME.match(aspect):
            raise UsageError(f"templates: aspect name {str(aspect)[:40]!r} must be a lower-case identifier (a-z, 0-9, _)")
        per_direction = value if isinstance(value, Mapping) else {d: value for d in ("s_h", "r_h", "h_r")}
        found[aspect] = {}
        for direction, template in per_direction.items():
            if direction not in ("s_h", "r_h", "h_r"):
                raise UsageError(f"templates: aspect {aspect!r}: unknown direction {str(direction)[:20]!r} (s_h, r_h, h_r)")
            if not isinstance(template, str) or PLACEHOLDER not in template:
                raise UsageError(f"templates: aspect {aspect!r} ({direction}): a template is a string holding {PLACEHOLDER}")
            found[aspect][direction] = template
    return found


def fill(template: str, text: str) -> str:
    """The template with every `{input}` replaced by `text` (plain replacement: braces in the
    text or elsewhere in the template are left as they are)."""
    return template.replace(PLACEHOLDER, text)


class PromptedLM:
    """Continuation log-likelihoods given prompts under a causal LM; the model is loaded once.
    `score(prompts, continuations)` -> [(mean, sum, tokens)] (G1, G2)."""

    def __init__(self, model: str, device: str = "cpu", dtype: str = "float32", max_length: int | None = None,
                 token_budget: int = DEFAULT_TOKEN_BUDGET, revision: str | None = None, cache_dir: str | None = None,
                 chat_template: bool = False, share_prompts: bool = True):
        from transformers import AutoModelForCausalLM

        from scoring.prompt_cache import PromptedLikelihood

        check_model_args(dtype, device, token_budget, max_length)
        self.source = resolve_model(model, revision=revision, cache_dir=cache_dir)
        self.tokenizer = load_tokenizer(self.source)
        self.limits = limits_for(self.source)
        self.limits.check_max_length(max_length)
        self.max_length = default_max_length(max_length, self.limits, self.tokenizer)
        self.dtype = dtype
        self.chat_template = bool(chat_template)
        if self.chat_template and not getattr(self.tokenizer, "chat_template", None):
            raise UsageError(f"chat_template: the tokenizer of {model} has no chat template")
        # data is text: special-token strings in it never become control tokens (docs/security.md)
        self.frame = ChatFrame(self.tokenizer, model) if self.chat_template else None
        self.literal = self.frame.literal if self.frame is not None else LiteralTokenizer(self.tokenizer)
        start = self.tokenizer.bos_token_id if self.tokenizer.bos_token_id is not None else self.tokenizer.eos_token_id
        self.start_id = None if start is None else int(start)
        self.token_budget = int(token_budget)
        self.share_prompts = bool(share_prompts)
        self.model = load_pretrained(AutoModelForCausalLM, self.source, dtype=dtype, device=device)
        # padding is masked out; any id the embedding holds will do (a tokenizer's pad id may not)
        pad = self.tokenizer.pad_token_id
        if pad is None or (self.limits.vocabulary is not None and pad >= self.limits.vocabulary):
            pad = self.start_id if self.start_id is not None else 0
        self.engine = None if self.model is None else PromptedLikelihood(self.model, pad_id=pad, token_budget=token_budget,
                                                                        share_prompts=share_prompts)

    def check_template(self, name: str, template: str) -> None:
        """Templates are tokenised as text, like the data they hold: a control-token string
        written in one (`<|im_start|>`, `</s>`) would stay text where its author meant markup,
        so it is refused when the metric is built; the model's chat markup comes from
        `chat_template`."""
        found = self.literal.first_control(template)
        if found:
            raise UsageError(f"templates: {name} writes the control token {found[:40]!r}, but templates are "
                             "tokenised as text; use chat_template: true for the model's chat markup")

    def prompt_ids(self, prompts: Sequence[str]) -> list[list[int]]:
        """G3: [start] + literal ids(prompt), or the chat frame's ids with `chat_template` (module
        docstring); `encode` also says which prompts the tokenizer cannot keep literal."""
        return self.encode(prompts, [])[0]

    def continuation_ids(self, continuations: Sequence[str]) -> list[list[int]]:
        """G3: literal ids(continuation), no special tokens, tokenised on its own."""
        return self.encode([], continuations)[1]

    def encode(self, prompts: Sequence[str], continuations: Sequence[str]) -> tuple[list[list[int]], list[list[int]], dict[int, str]]:
        """Prompt ids, continuation ids and {pair: reason} for the pairs whose text holds a
        control token the tokenizer yields even as plain text (`scoring.literal_tokens`). Each
        distinct prompt is tokenised once (a dump repeats each source across its systems)."""
        found: dict[int, str] = {}
        unique = list(dict.fromkeys(prompts))
        by_text: dict[str, tuple[list[int], str | None]]
        if self.frame is not None:
            by_text = self._too_long(unique)  # a chat frame tokenises whole contents: not a 1 MB one
            rest = [p for p in unique if p not in by_text]
            by_text.update(zip(rest, self.frame.encode(rest)))
        else:
            head = [] if self.start_id is None else [self.start_id]
            by_text = {p: (head + ids, self.literal.problem(p, ids)) for p, ids in zip(unique, self._head_ids(unique))}
        p_ids = []
        for k, p in enumerate(prompts):
            ids, problem = by_text[p]
            p_ids.append(ids)
            if problem is not None:
                found[k] = f"prompt {problem}"
        c_ids = self._head_ids(continuations)
        for k, (c, ids) in enumerate(zip(continuations, c_ids)):
            problem = self.literal.problem(c, ids)
            if problem is not None:
                found.setdefault(k, f"continuation {problem}")
        return p_ids, c_ids, found

    def _head_ids(self, texts: Sequence[str]) -> list[list[int]]:
        """Literal ids of each text, read from its head only (`scoring.text_encoding.tokenize_heads`):
        all of them for a text of at most `max_length` + HEAD_MARGIN tokens, and more than that
        many for a longer one, which `problems` refuses whatever its rest (a 1 MB cell is not
        tokenised whole only to be found too long)."""
        return tokenize_heads(self.literal.ids, list(texts), self.max_length)[0] if texts else []

    def _too_long(self, prompts: Sequence[str]) -> dict[str, tuple[list[int], str | None]]:
        """{prompt: (its head's literal ids, problem)} for the prompts whose head alone holds
        more than `max_length` + HEAD_MARGIN tokens: too long whatever the chat frame adds, so
        they are refused by `problems` without being framed and tokenised whole. Only prompts
        longer than the head's characters are looked at; the rest go to the frame untouched."""
        bound = self.max_length + HEAD_MARGIN
        long = [p for p in prompts if len(p) > bound * HEAD_CHARS_PER_TOKEN]
        return {p: (ids, self.literal.problem(p, ids)) for p, ids in zip(long, self._head_ids(long)) if len(ids) > bound}

    def _count(self, ids: Sequence[int]) -> str:
        """How many tokens `ids` are ("N tokens"; "more than N tokens" for ids read from a long
        text's head, `_head_ids`)."""
        bound = self.max_length + HEAD_MARGIN
        return f"{len(ids)} tokens" if len(ids) <= bound else f"more than {bound} tokens"

    def problems(self, prompts: list[list[int]], continuations: list[list[int]],
                 text_problems: dict[int, str] | None = None) -> dict[int, str]:
        """{pair: reason} for pairs the model cannot score: a text holding a control token
        (`text_problems`, from `encode`), no continuation tokens, prompt + continuation past
        `max_length`, ids outside the embedding (settled on the host)."""
        found: dict[int, str] = dict(text_problems or {})
        for k, (p, c) in enumerate(zip(prompts, continuations)):
            if k in found:
                continue
            if not c:
                found[k] = "continuation has no tokens"
            elif len(p) + len(c) > self.max_length:
                found[k] = (f"prompt ({self._count(p)}) + continuation ({self._count(c)}) is longer than "
                            f"max_length {self.max_length}")
        for what, sequences in (("prompt", prompts), ("continuation", continuations)):
            ragged = Ragged.from_lists(sequences)
            for k, reason in self.limits.problems(ragged.values, ragged.offsets).items():
                found.setdefault(k, f"{what}: {reason}")
        return found

    def pair_logprobs(self, prompts: Ragged, continuations: Ragged) -> list[tuple[float, int]]:
        """(sum of continuation log-probabilities, continuation tokens) per id pair."""
        return self.engine.continuation_logprobs(prompts, continuations)

    def score(self, prompts: Sequence[str], continuations: Sequence[str]) -> list[tuple[float, float, int]]:
        """(mean, sum, tokens) of log p(continuation | prompt) per pair (G1, G2); a pair the
        model cannot score raises ValueError naming it."""
        prompts, continuations = check_text_list("prompts", prompts), check_text_list("continuations", continuations)
        if len(prompts) != len(continuations):
            raise ValueError(f"{len(prompts)} prompts but {len(continuations)} continuations")
        p_ids, c_ids, text_problems = self.encode(prompts, continuations)
        found = self.problems(p_ids, c_ids, text_problems)
        if found:
            k = min(found)
            raise ValueError(f"pair {k}: {found[k]}")
        if not prompts:
            return []
        results = self.pair_logprobs(Ragged.from_lists(p_ids), Ragged.from_lists(c_ids))
        return [(total / n, total, n) for total, n in results]

    def signature_params(self) -> dict[str, Any]:
        params = {
            **self.source.identity(),
            "dtype": self.dtype,
            "max_length": self.max_length,
            "start_token": "chat template" if self.chat_template else self.start_id,
            "tokenization": "prompt and continuation separately, joined",
            "text": self.frame.describe() if self.frame is not None else self.literal.describe(),
            "batching": (f"shared prompts,token_budget={self.token_budget}" if self.share_prompts
                         else f"independent,token_budget={self.token_budget}"),
            **library_versions("torch", "transformers"),
        }
        if self.chat_template:
            params["chat_template"] = stable_hash(self.tokenizer.chat_template)
        return params


class GPTScoreMetric(RowMetric):
    """Prompted conditional likelihood under a decoder LM (GPTScore): columns
    `gptscore_<aspect>_<direction>`, the mean (or, with `reduction: sum`, summed) log-probability
    of the continuation given a per-aspect prompt built from the row (module docstring)."""

    name = "gptscore"
    score_inputs = DIRECTION_INPUTS
    needs = "text; source for s_h; references for r_h, h_r, f"

    def __init__(self, model: str = "gpt2", templates: str | Mapping[str, Any] | None = None,
                 aspects: Sequence[str] | None = None, directions: Sequence[str] = ("s_h",), agg: str = "mean",
                 reduction: str = "mean", chat_template: bool = False, share_prompts: bool = True,
                 revision: str | None = None, dtype: str = "float32", device: str = "cpu", max_length: int | None = None,
                 token_budget: int = DEFAULT_TOKEN_BUDGET, cache_dir: str | None = None):
        directions = check_choices("directions", directions, DIRECTIONS, "")
        self.agg = check_choice("agg", agg, AGGREGATES)
        self.reduction = check_choice("reduction", reduction, REDUCTIONS)
        self.templates = load_templates(templates)
        if aspects is None:
            aspects = list(self.templates)
        elif isinstance(aspects, str):
            aspects = [aspects]
        missing = [a for a in aspects if a not in self.templates]
        if missing or not aspects:
            raise UsageError(f"aspects: {missing or 'none'} not in the templates ({', '.join(self.templates)})")
        self.aspects = tuple(aspects)
        self.directions = directions
        for aspect in self.aspects:
            for group in self._groups():
                if group not in self.templates[aspect]:
                    raise UsageError(f"templates: aspect {aspect!r} has no template for direction {group}")
        self.scorer = PromptedLM(model, device=device, dtype=dtype, max_length=max_length, token_budget=token_budget,
                                 revision=revision, cache_dir=cache_dir, chat_template=chat_template, share_prompts=share_prompts)
        for aspect in self.aspects:
            for group in self._groups():
                self.scorer.check_template(f"aspect {aspect!r} ({group})", self.templates[aspect][group])
        needs_references = any(d != "s_h" for d in directions)
        self.required_columns = ("text",) + (("source",) if "s_h" in directions else ()) + (("references",) if needs_references else ())
        self.output_columns = tuple(f"gptscore_{a}_{d}" for a in self.aspects for d in directions)

    def score_needs(self) -> dict[str, tuple[str, ...]]:
        """s_h needs `source`; r_h, h_r and F need `references` (`DIRECTION_INPUTS`), per aspect."""
        return {f"gptscore_{a}_{d}": tuple(c for c in DIRECTION_INPUTS[d] if c != "text")
                for a in self.aspects for d in self.directions}

    def _groups(self) -> list[str]:
        wanted = {"s_h": ("s_h",), "r_h": ("r_h", "f"), "h_r": ("h_r", "f")}
        return [group for group, directions in wanted.items() if any(d in self.directions for d in directions)]

    def signature(self) -> Signature:
        used = {a: {g: self.templates[a][g] for g in self._groups()} for a in self.aspects}
        params = {
            **self.scorer.signature_params(),
            "templates": f"{len(used)}:{stable_hash(used)}",
            "aspects": list(self.aspects),
            "directions": list(self.directions),
            "reduction": self.reduction,
        }
        if "references" in self.required_columns:
            params["agg"] = self.agg
        return Signature(self.name, VERSION, params)

    def validate(self, row: dict[str, Any]) -> str | None:
        reason = super().validate(row)
        if reason is None and "references" in self.checked_columns(row):
            if any(not isinstance(r, str) or not r.strip() for r in row["references"]):
                return "empty or null reference in 'references'"
        return reason

    def _pairs(self, group: str, row: dict[str, Any]) -> list[tuple[str, str]]:
        """(prompt, continuation) texts of one row in one pass, in the order (entry, aspect);
        none when the row lacks the pass's input (`RowMetric.lacking`)."""
        if is_absent(row.get("source" if group == "s_h" else "references")):
            return []
        if group == "s_h":
            entries = [(row["source"], row["text"])]
        elif group == "r_h":
            entries = [(reference, row["text"]) for reference in row["references"]]
        else:
            entries = [(row["text"], reference) for reference in row["references"]]
        return [(fill(self.templates[a][group], x), y) for x, y in entries for a in self.aspects]

    def prepare(self, rows: Sequence[dict[str, Any]]) -> "pa.Table":
        """Per pass (`<pass>_prompt_ids`, `<pass>_continuation_ids`, `list<list<int32>>`): the
        ids of every (prompt, continuation) pair of the row, in the order (entry, aspect). A row
        with a pair the model cannot score (too long, ids outside the embedding) is a RowError."""
        import pyarrow as pa

        columns: dict[str, pa.Array] = {}
        for group in self._groups():
            prompts, continuations, counts = [], [], []
            for row in rows:
                pairs = self._pairs(group, row)
                prompts += [p for p, _ in pairs]
                continuations += [c for _, c in pairs]
                counts.append(len(pairs))
            owners = np.repeat(np.arange(len(rows)), counts)
            p_ids, c_ids, text_problems = self.scorer.encode(prompts, continuations)
            found = self.scorer.problems(p_ids, c_ids, text_problems)
            if found:
                k = min(found, key=lambda k: (owners[k], k))
                raise RowError(int(owners[k]), f"{group}: {found[k]}")
            row_offsets = np.zeros(len(rows) + 1, dtype=np.int32)
            np.cumsum(counts, out=row_offsets[1:])
            for name, ids in (("prompt", p_ids), ("continuation", c_ids)):
                ragged = Ragged.from_lists(ids)
                raise_row_error(self.scorer.limits, ragged.values, ragged.offsets, owners, f"{group} {name}")
                columns[f"{group}_{name}_ids"] = id_lists(ragged.values.astype(np.int32), ragged.offsets.astype(np.int32), row_offsets)
        columns["skipped"] = pa.array([self.partial_reason(row) for row in rows], type=pa.string())
        return pa.table(columns)

    def score_prepared(self, table: "pa.Table") -> list[dict[str, Any]]:
        # every pass's pairs in one engine call: prompts shared across passes and aspects too
        prompts, continuations, spans = [], [], {}
        start = 0
        for group in self._groups():
            p = Ragged.from_arrow(table.column(f"{group}_prompt_ids"))
            c = Ragged.from_arrow(table.column(f"{group}_continuation_ids"))
            column = table.column(f"{group}_prompt_ids").combine_chunks()
            bounds = column.offsets.to_numpy(zero_copy_only=False)
            spans[group] = (start, (bounds - bounds[0]).tolist())
            prompts.append(p)
            continuations.append(c)
            start += len(p)
        merged_p, merged_c = _join(prompts), _join(continuations)
        totals = self.scorer.pair_logprobs(merged_p, merged_c) if len(merged_p) else []
        values = [total / n if self.reduction == "mean" else total for total, n in totals]
        width = len(self.aspects)
        aggregate = AGGREGATES[self.agg]
        skipped = table.column("skipped").to_pylist() if "skipped" in table.column_names else [None] * table.num_rows
        results: list[dict[str, Any]] = []
        for i in range(table.num_rows):
            per: dict[str, list[list[float]]] = {}  # pass -> [entry][aspect]
            for group, (base, bounds) in spans.items():
                per[group] = [values[base + k : base + k + width] for k in range(bounds[i], bounds[i + 1], width)]
            result: dict[str, Any] = {}
            for j, aspect in enumerate(self.aspects):  # a pass with no entries: the row lacked its input
                if "s_h" in self.directions and per["s_h"]:
                    result[f"gptscore_{aspect}_s_h"] = per["s_h"][0][j]
                if "r_h" in self.directions and per.get("r_h"):
                    result[f"gptscore_{aspect}_r_h"] = aggregate([entry[j] for entry in per["r_h"]])
                if "h_r" in self.directions and per.get("h_r"):
                    result[f"gptscore_{aspect}_h_r"] = aggregate([entry[j] for entry in per["h_r"]])
                if "f" in self.directions and per.get("r_h") and per.get("h_r"):
                    result[f"gptscore_{aspect}_f"] = aggregate([(p[j] + r[j]) / 2 for p, r in zip(per["r_h"], per["h_r"])])
            if skipped[i] is not None:
                result["skipped"] = skipped[i]
            results.append(result)
        return results

    def score_valid(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return self.score_prepared(self.prepare(rows))


def _join(parts: list[Ragged]) -> Ragged:
    """Ragged sequences of several arrays, in order."""
    if len(parts) == 1:
        return parts[0]
    values = np.concatenate([p.values[p.offsets[0] : p.offsets[-1]] for p in parts]) if parts else np.zeros(0, np.int64)
    lengths = np.concatenate([p.lengths for p in parts]) if parts else np.zeros(0, np.int64)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return Ragged(values, offsets)
