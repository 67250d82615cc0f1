"""CTRLEval (Ke et al., ACL 2022): unsupervised evaluation of controlled generation by
PEGASUS text infilling (docs/metrics.md, C1-C4; the original's behaviours: docs/fidelity.md).

Input I = (prefix X, attribute a, text Y). lm_score(src, tgt) = -mean token NLL of tgt given
src (decoder start = pad). Weights (Eq. 5-7): ISF(s) = max IWF over the token ids of s,
NISF(s) = ISF(s) / sum of ISF over the evaluators of the aspect (plain mean when that sum is
0).
- Coherence (Eq. 2-4, 8): split Y into sentences (NLTK Punkt by default, `sentence_splitter`),
  mask each sentence Y_j in turn and infill it: source = " ".join(Y_<j) + " <mask_1> " +
  " ".join(Y_>j) (the original's string, edge spaces included), target Y_j with `</s>`:
  S_coh = sum_j NISF(Y_j) * lm_score.
- Consistency (Eq. 9-11): R = Y[len(X):]; s1 = lm_score(X + " <mask_1>", R),
  s2 = lm_score("<mask_1> " + R, X), targets without `</s>`:
  S_cons = NISF(R) * s1 + NISF(X) * s2.
- Attribute relevance (Eq. 12-17): evaluators = prompts x verbaliser rows; s(e,l) = exp(-mean
  NLL of label word l, no `</s>`); P_e(a) = s(e,a) / sum_l s(e,l); w_e = sum_l s(e,l);
  S_rel = sum_e (w_e / sum_e' w_e') * P_e(a). Each filled prompt is encoded once and every
  label word of every verbaliser row is decoded against it.

Tokenisation (`tokenization`, docs/metrics.md): `slow` (default) gives the ids of the slow
sentencepiece `PegasusTokenizer` of transformers 4.4 that the original ran, which drops the
whitespace next to `<mask_1>`; `fast` tokenises with the loaded tokenizer as is, which keeps
that whitespace as an extra `▁` piece.

Two halves (the two-stage protocol of `scoring.metric`). Every aspect is a set of evaluators
per text (`Evaluators`): the CPU half (`CTRLEval.coherence_ids` / `consistency_ids` /
`relevance_ids`; tokenizer and IWF table only, no weights) splits sentences, builds the masked
sources and filled prompts, checks each row (no sentences, a text not starting with its
prefix, an unknown label: `RowError`), tokenises and computes the NISF weights, which depend
on the target ids only. The device half (`CTRLEval.weighted_scores` for Eq. 8 and 11,
`relevance_scores` for Eq. 14-17) makes one engine call per aspect and applies the formulas.
The text API (`coherence`, `consistency`, `relevance`, `score`) and `CTRLEvalMetric`
(`prepare` -> an Arrow table of the evaluators' ids, `score_prepared`) both run these two
halves, so their numbers are the same.
"""

from __future__ import annotations

import functools
import pathlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from scoring.engine import DEFAULT_TOKEN_BUDGET, Ragged, Seq2SeqLikelihood
from scoring.errors import UsageError
from scoring.iwf import load_iwf
from scoring.metric import RowError, RowMetric
from scoring.model_limits import default_max_length, limits_for, raise_row_error
from scoring.models import file_digest, load_pretrained, load_tokenizer, resolve_model
from scoring.params import check_choice, check_model_args, check_positive_int, check_text_list
from scoring.parsed_tokens import ParsedTokens, joined, kept_for
from scoring.resources import ctrleval_task_paths, resource_path
from scoring.sentences import DEFAULT_SPLITTER, SPLITTER_IDS, SPLITTERS, split_sentences
from scoring.signature import Signature, library_versions, stable_hash
from scoring.text_encoding import TOKENIZATION_STYLES, encode_ragged, id_lists, read_lines

if TYPE_CHECKING:
    import pyarrow as pa

VERSION = "1.3"  # 1.3: relevance prompts must hold both slots; a text's own placeholder strings stay text. 1.2: a row gets each aspect whose columns it has
MASK = "<mask_1>"
# coherence masks each sentence in turn: one copy of the text and one model pass per sentence.
# A text past either bound is its row's error (they decide which rows are refused, never a
# number): no CTRLEval text comes near them, and a 1 MB cell of one-word lines would otherwise
# build hundreds of gigabytes of copies
MAX_SENTENCES = 512
MAX_MASKED_CHARS = 64_000_000  # sentences x characters of the text, the masked copies' size
# what each aspect reads: coherence the text alone, consistency the prefix, relevance the control label
ASPECT_INPUTS = {"coherence": ("text",), "consistency": ("text", "prefix"), "relevance": ("text", "attribute")}
ASPECTS = {"coherence": "coherence", "coh": "coherence", "consistency": "consistency", "cons": "consistency",
           "relevance": "relevance", "rel": "relevance", "ar": "relevance"}


@dataclass(frozen=True)
class Verbalizer:
    """Label names and verbaliser rows (one label word per label in each row)."""

    labels: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    @classmethod
    def from_file(cls, path: str | pathlib.Path) -> "Verbalizer":
        """Tab-separated: line 1 = label names, each further line = one word per label. At
        least two labels, none empty or twice (with one, P_e(a) of Eq. 14 is 1 for every text; a
        label twice, its second column is never read), no empty word."""
        lines = [line.split("\t") for line in read_lines(path, "verbaliser")]
        labels = tuple(cell.strip() for cell in lines[0])
        if len(labels) < 2 or "" in labels or len(set(labels)) != len(labels):
            raise ValueError(f"{path}:1: the label line must name two or more distinct labels, "
                             f"got {[label[:40] for label in labels[:20]]}")
        rows = []
        for number, cells in enumerate(lines[1:], start=2):
            words = tuple(cell.strip() for cell in cells)
            if len(words) != len(labels):
                raise ValueError(f"{path}:{number}: {len(words)} words for {len(labels)} labels")
            if "" in words:
                raise ValueError(f"{path}:{number}: an empty label word (for {labels[words.index('')][:40]!r})")
            rows.append(words)
        if not rows:
            raise ValueError(f"{path}: no verbaliser rows after the label line")
        return cls(labels, tuple(rows))


GEN_RESULT, MASK_SLOT = "<gen_result>", "<mask_token>"  # a relevance prompt's two placeholders


def read_prompts(path) -> list[str]:
    """Relevance prompts (Eq. 12), one per line, each holding `<gen_result>` (the text) and
    `<mask_token>` (where a label word goes) exactly once: a prompt without the slot, or with
    two, would score every label word against something else, with no row error."""
    prompts = read_lines(path, "prompt")
    for number, prompt in enumerate(prompts, start=1):
        counts = (prompt.count(GEN_RESULT), prompt.count(MASK_SLOT))
        if counts != (1, 1):
            raise ValueError(f"{path}: prompt {number} ({prompt[:80]!r}) holds {GEN_RESULT} {counts[0]} times and "
                             f"{MASK_SLOT} {counts[1]} times; each must appear exactly once")
    return prompts


def fill_prompt(prompt: str, text: str) -> str:
    """`prompt` with the text in its `<gen_result>` and the mask token in its `<mask_token>`:
    the text goes in last and is never searched, so a text holding either placeholder string
    stays that text."""
    before, after = prompt.split(GEN_RESULT)
    return before.replace(MASK_SLOT, MASK) + text + after.replace(MASK_SLOT, MASK)


def nisf_weights(isf: Sequence[float]) -> list[float]:
    """NISF (Eq. 7): ISF normalised over the evaluators of one aspect; plain mean if all 0."""
    total = float(sum(isf))
    if total <= 0.0:
        return [1.0 / len(isf)] * len(isf)
    return [value / total for value in isf]


def relevance_from_likelihoods(s: np.ndarray, label_index: int) -> float:
    """Eq. 14-17 for one text. `s[e, l]` = exp(-mean NLL) of label l under evaluator e."""
    label_mass = s.sum(axis=1)  # w_e (Eq. 15)
    p_attribute = s[:, label_index] / label_mass  # P_e(a) (Eq. 14)
    weights = label_mass / label_mass.sum()  # Eq. 16
    return float((weights * p_attribute).sum())  # Eq. 17


def _read_param_file(name: str, read, path):
    """Read a parameter's file; a missing or malformed one is a UsageError naming the param."""
    try:
        return read(path)
    except (OSError, ValueError) as exc:
        raise UsageError(f"{name}: {exc}") from exc


@dataclass(frozen=True)
class Evaluators:
    """One aspect's evaluators for a list of texts, as token ids in Arrow's list layout (the
    CPU half's output, the device half's input). Text i owns evaluators
    `bounds[i]:bounds[i + 1]`; evaluator k is the pair (`sources[k]`, `targets[k]`) weighted
    by `weights[k]` (NISF, coherence and consistency), or, for relevance (`targets` None),
    filled prompt k decoded against every label word, with `labels[i]` the index of text i's
    label among the verbaliser labels. `truncated[i]`: an id sequence of text i was cut."""

    sources: Ragged
    targets: Ragged | None
    bounds: np.ndarray
    truncated: np.ndarray
    weights: np.ndarray | None = None
    labels: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.bounds) - 1

    def columns(self, aspect: str) -> dict[str, "pa.Array"]:
        """The prepared table's columns of this aspect (`CTRLEvalMetric.prepare`)."""
        import pyarrow as pa

        columns = {f"{aspect}_source_ids": id_lists(self.sources.values, self.sources.offsets, self.bounds)}
        if self.targets is not None:
            columns[f"{aspect}_target_ids"] = id_lists(self.targets.values, self.targets.offsets, self.bounds)
        if self.weights is not None:
            columns[f"{aspect}_weights"] = pa.ListArray.from_arrays(pa.array(self.bounds, type=pa.int32()), pa.array(self.weights, type=pa.float64()))
        if self.labels is not None:
            columns[f"{aspect}_label"] = pa.array(self.labels, type=pa.int32())
        return columns

    def spread(self, owners: Sequence[int], count: int) -> "Evaluators":
        """These evaluators (of the texts `owners`, in order) as the evaluators of `count` texts:
        every other text has none (an aspect the row lacks a column for)."""
        rows = np.zeros(count, dtype=np.int64)
        rows[np.asarray(owners, dtype=np.int64)] = np.diff(self.bounds)
        truncated = np.zeros(count, dtype=bool)
        truncated[np.asarray(owners, dtype=np.int64)] = self.truncated
        labels = None
        if self.labels is not None:
            labels = np.full(count, -1, dtype=np.int64)
            labels[np.asarray(owners, dtype=np.int64)] = self.labels
        return Evaluators(self.sources, self.targets, _bounds(rows), truncated, self.weights, labels)

    @classmethod
    def from_table(cls, table: "pa.Table", aspect: str) -> "Evaluators":
        """The evaluators of `aspect` from a prepared table (or a slice of one)."""
        names = set(table.column_names)
        source_column = table.column(f"{aspect}_source_ids").combine_chunks()
        bounds = source_column.offsets.to_numpy(zero_copy_only=False).astype(np.int64)
        targets = weights = labels = None
        if f"{aspect}_target_ids" in names:
            targets = Ragged.from_arrow(table.column(f"{aspect}_target_ids"))
        if f"{aspect}_weights" in names:
            weights = table.column(f"{aspect}_weights").combine_chunks().flatten().to_numpy(zero_copy_only=False)
        if f"{aspect}_label" in names:
            labels = table.column(f"{aspect}_label").to_numpy()
        truncated = table.column("truncated").to_numpy(zero_copy_only=False)
        return cls(Ragged.from_arrow(source_column), targets, bounds - bounds[0], truncated, weights, labels)


def _bounds(counts: Sequence[int]) -> np.ndarray:
    """Offsets (len(counts) + 1) of consecutive groups of these sizes."""
    bounds = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(np.asarray(counts, dtype=np.int64), out=bounds[1:])
    return bounds


def _check_sentence_count(row: int, sentences: Sequence[str], text: str) -> None:
    """RowError when masking each sentence of `text` would cost too much (MAX_SENTENCES,
    MAX_MASKED_CHARS)."""
    count = len(sentences)
    if count > MAX_SENTENCES:
        raise RowError(row, f"text has {count} sentences, more than {MAX_SENTENCES} (coherence masks each in turn: "
                            "one model pass per sentence)")
    if count * len(text) > MAX_MASKED_CHARS:
        raise RowError(row, f"text has {count} sentences in {len(text)} characters: their masked copies would hold "
                            f"{count * len(text)} characters, more than {MAX_MASKED_CHARS}")


def masked_source(sentences: Sequence[str], index: int) -> str:
    """The coherence source for sentence `index`: the original's
    `' '.join(before) + ' <mask_1> ' + ' '.join(after)`, edge spaces included."""
    return " ".join(sentences[:index]) + f" {MASK} " + " ".join(sentences[index + 1 :])


class CTRLEval:
    """CTRLEval with the original call shape `score(aspect, data, prefix, label, batch_size)`."""

    def __init__(
        self,
        model: str = "google/pegasus-large",
        iwf: str | None = None,
        prompts: str | None = None,
        verbalizers: str | None = None,
        device: str = "cpu",
        dtype: str = "float32",
        max_length: int | None = None,
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        revision: str | None = None,
        cache_dir: str | None = None,
        sentence_splitter: str = DEFAULT_SPLITTER,
        tokenization: str = "slow",
        compile: bool = False,
    ):
        from transformers import AutoModelForSeq2SeqLM

        if iwf is None:
            raise UsageError("CTRLEval needs an IWF table (`iwf`): iwf_full.txt for pegasus-large, or one computed for your tokenizer")
        check_model_args(dtype, device, token_budget, max_length)
        self.sentence_splitter = check_choice("sentence_splitter", sentence_splitter, SPLITTERS)
        self.tokenization = check_choice("tokenization", tokenization, TOKENIZATION_STYLES)
        if prompts:
            prompts = str(resource_path(prompts))
        if verbalizers:
            verbalizers = str(resource_path(verbalizers))
        # parameter files first: a wrong path fails before any model loads
        self.iwf_path = str(iwf)
        self.iwf = _read_param_file("iwf", load_iwf, iwf)
        self.prompts = _read_param_file("prompts", read_prompts, prompts) if prompts else None
        self.verbalizer = _read_param_file("verbalizers", Verbalizer.from_file, verbalizers) if verbalizers else None
        self.source = resolve_model(model, revision=revision, cache_dir=cache_dir)
        self.tokenizer = load_tokenizer(self.source)
        self.limits = limits_for(self.source)  # embedding and position sizes, from the config
        self.limits.check_max_length(max_length)
        self.model = load_pretrained(AutoModelForSeq2SeqLM, self.source, dtype=dtype, device=device)  # None: ids only
        if len(self.iwf) < len(self.tokenizer):
            raise UsageError(f"iwf: table {iwf} has {len(self.iwf)} entries but the tokenizer of {model} has {len(self.tokenizer)} ids")
        if MASK not in self.tokenizer.get_vocab():
            raise UsageError(f"model: tokenizer of {model} has no sentence mask token {MASK}")
        self.prompt_files = (prompts, verbalizers)
        self.dtype = dtype
        # unset: the model's own limit (position table; the tokenizer's for relative positions)
        self.max_length = default_max_length(max_length, self.limits, self.tokenizer)
        self.engine = None if self.model is None else Seq2SeqLikelihood(  # None: built to prepare ids only
            self.model, pad_id=self.tokenizer.pad_token_id, decoder_start_id=self.model.config.decoder_start_token_id,
            token_budget=token_budget, compile_layers=bool(compile),
        )
        self.compile = bool(compile)

    # ----- ids: the CPU half (tokenizer and IWF table only) -------------------------------
    def _encode(self, texts: Sequence[str], eos: bool) -> tuple[Ragged, np.ndarray]:
        """Token ids (in the configured `tokenization` style, cut to `max_length`) and a
        truncated flag per text."""
        values, offsets, cut = encode_ragged(self.tokenizer, texts, self.max_length, special_tokens=eos, style=self.tokenization)
        return Ragged(values, offsets), cut

    def _evaluators(self, sources: list[str], targets: list[str], counts: list[int], target_eos: bool, what: str) -> Evaluators:
        """Evaluators of the weighted aspects: pair k = (sources[k], targets[k]), `counts[i]`
        pairs per text, each weighted by the NISF of its target within its text."""
        bounds = _bounds(counts)
        source_ids, source_cut = self._encode(sources, eos=True)
        target_ids, target_cut = self._encode(targets, eos=target_eos)
        owners = np.repeat(np.arange(len(counts)), counts)
        empty = np.flatnonzero(target_ids.lengths == 0)
        if len(empty):
            raise RowError(int(owners[empty[0]]), f"{what} has no tokens")
        raise_row_error(self.limits, source_ids.values, source_ids.offsets, owners, f"{what} (source)")
        raise_row_error(self.limits, target_ids.values, target_ids.offsets, owners, what)
        truncated = np.zeros(len(counts), dtype=bool)
        np.logical_or.at(truncated, owners, source_cut | target_cut)
        # ISF (Eq. 6) per target: the max IWF over its ids; NISF (Eq. 7) within each text
        isf = np.maximum.reduceat(self.iwf[target_ids.values], target_ids.offsets[:-1]) if len(target_ids) else np.zeros(0)
        weights = np.fromiter(
            (w for i in range(len(counts)) for w in nisf_weights(isf[bounds[i] : bounds[i + 1]].tolist())),
            dtype=np.float64, count=len(target_ids),
        )
        return Evaluators(source_ids, target_ids, bounds, truncated, weights=weights)

    def coherence_ids(self, texts: Sequence[str]) -> Evaluators:
        """Coherence evaluators (Eq. 2-4): per sentence, its masked source and the sentence
        with `</s>`. A text without sentences raises RowError."""
        sources, targets, counts = [], [], []
        for i, text in enumerate(texts):
            sentences = split_sentences(text, self.sentence_splitter)
            if not sentences:
                raise RowError(i, "text has no sentences")
            _check_sentence_count(i, sentences, text)
            sources += [masked_source(sentences, j) for j in range(len(sentences))]
            targets += sentences
            counts.append(len(sentences))
        return self._evaluators(sources, targets, counts, target_eos=True, what="a sentence")

    def consistency_ids(self, texts: Sequence[str], prefixes: Sequence[str]) -> Evaluators:
        """Consistency evaluators (Eq. 9-10): (X + " <mask_1>", R) and ("<mask_1> " + R, X),
        targets without `</s>`. A text that does not start with its prefix, or has nothing
        after it, raises RowError."""
        if len(texts) != len(prefixes):
            raise ValueError(f"{len(texts)} texts but {len(prefixes)} prefixes")
        sources, targets = [], []
        for i, (text, prefix) in enumerate(zip(texts, prefixes)):
            if not text.startswith(prefix):
                raise RowError(i, f"text does not start with its prefix {prefix!r}")
            remainder = text[len(prefix) :]
            if not remainder.strip():
                raise RowError(i, "text has nothing after its prefix")
            sources += [f"{prefix} {MASK}", f"{MASK} {remainder}"]
            targets += [remainder, prefix]
        return self._evaluators(sources, targets, [2] * len(texts), target_eos=False, what="the prefix or the text after it")

    def relevance_ids(self, texts: Sequence[str], labels: Sequence[str]) -> Evaluators:
        """Relevance sources (Eq. 12-13): each prompt filled with the text, with `</s>`; the
        label words are the scorer's (`label_words`). A label that is not a verbaliser label
        raises RowError."""
        if self.prompts is None or self.verbalizer is None:
            raise ValueError("attribute relevance needs prompts and verbalizers")
        if len(texts) != len(labels):
            raise ValueError(f"{len(texts)} texts but {len(labels)} labels")
        label_names = self.verbalizer.labels
        for i, label in enumerate(labels):
            if label not in label_names:
                raise RowError(i, f"label {label!r} is not one of the verbaliser labels {list(label_names)}")
        filled = [fill_prompt(p, text) for text in texts for p in self.prompts]
        source_ids, source_cut = self._encode(filled, eos=True)
        counts = [len(self.prompts)] * len(texts)
        raise_row_error(self.limits, source_ids.values, source_ids.offsets, np.repeat(np.arange(len(texts)), counts), "prompted text")
        truncated = np.zeros(len(texts), dtype=bool)
        np.logical_or.at(truncated, np.repeat(np.arange(len(texts)), counts), source_cut)
        label_index = np.fromiter((label_names.index(label) for label in labels), dtype=np.int32, count=len(labels))
        return Evaluators(source_ids, None, _bounds(counts), truncated, labels=label_index)

    @functools.cached_property
    def label_words(self) -> Ragged:
        """The ids of every label word of every verbaliser row (row-major, no `</s>`),
        decoded against each relevance source."""
        words = [word for row in self.verbalizer.rows for word in row]
        ids = self._encode(words, eos=False)[0]
        self.limits.check_sequences([ids.values[ids.offsets[k]:ids.offsets[k + 1]] for k in range(len(ids))], "label word")
        return ids

    # ----- scores: the device half -------------------------------------------------------
    def _lm_scores(self, evaluators: Evaluators) -> list[float]:
        """lm_score of every (source, target) pair: one engine call, one target per source."""
        groups = [range(k, k + 1) for k in range(len(evaluators.sources))]
        return [-value for value in self.engine.pair_nll(evaluators.sources, evaluators.targets, groups)]

    def weighted_scores(self, evaluators: Evaluators) -> list[float]:
        """Coherence (Eq. 8) and consistency (Eq. 11): per text, sum over its evaluators of
        NISF * lm_score."""
        if len(evaluators) == 0:
            return []
        lm = self._lm_scores(evaluators)
        weights, bounds = evaluators.weights.tolist(), evaluators.bounds.tolist()
        return [sum(w * s for w, s in zip(weights[a:b], lm[a:b])) for a, b in zip(bounds[:-1], bounds[1:])]

    def relevance_scores(self, evaluators: Evaluators) -> list[float]:
        """Eq. 14-17: every label word decoded against each filled prompt (one encoder pass
        per prompt), s(e, l) = exp(-mean NLL), then `relevance_from_likelihoods` per text."""
        if len(evaluators) == 0:
            return []
        words = self.label_words
        n_sources, n_words = len(evaluators.sources), len(words)
        targets = words.take(np.tile(np.arange(n_words), n_sources))
        groups = [range(k * n_words, (k + 1) * n_words) for k in range(n_sources)]
        nll = np.asarray(self.engine.pair_nll(evaluators.sources, targets, groups), dtype=np.float64).reshape(n_sources, n_words)
        n_labels, bounds = len(self.verbalizer.labels), evaluators.bounds.tolist()
        scores = []
        for i, label_index in enumerate(evaluators.labels.tolist()):
            s = np.exp(-nll[bounds[i] : bounds[i + 1]]).reshape(-1, n_labels)  # evaluators (prompt x verbaliser row) x labels
            scores.append(relevance_from_likelihoods(s, label_index))
        return scores

    def aspect_scores(self, aspect: str, evaluators: Evaluators) -> list[float]:
        """Scores of one aspect (coherence / consistency / relevance) from its evaluators."""
        return self.relevance_scores(evaluators) if aspect == "relevance" else self.weighted_scores(evaluators)

    # ----- aspects (text API) ------------------------------------------------------------
    def coherence(self, texts: Sequence[str]) -> tuple[list[float], list[bool]]:
        """Eq. 2-4, 8. Returns scores and per-text truncation flags."""
        evaluators = self.coherence_ids(texts)
        return self.weighted_scores(evaluators), evaluators.truncated.tolist()

    def consistency(self, texts: Sequence[str], prefixes: Sequence[str]) -> tuple[list[float], list[bool]]:
        """Eq. 9-11. A text that does not start with its prefix raises RowError."""
        evaluators = self.consistency_ids(texts, prefixes)
        return self.weighted_scores(evaluators), evaluators.truncated.tolist()

    def relevance(self, texts: Sequence[str], labels: Sequence[str]) -> tuple[list[float], list[bool]]:
        """Eq. 12-17: one encoder pass per (text, prompt), all label words decoded against it."""
        evaluators = self.relevance_ids(texts, labels)
        return self.relevance_scores(evaluators), evaluators.truncated.tolist()

    def score(self, aspect: str, data: Sequence[str], prefix: Sequence[str] | None = None, label: Sequence[str] | None = None, batch_size: int | None = None) -> list[float]:
        """Score texts on one aspect (coherence / consistency / relevance, or coh / cons /
        rel). `batch_size` caps rows per forward; the token budget does the batching."""
        aspect_name = ASPECTS.get(aspect)
        if aspect_name is None:
            raise UsageError(f"unknown aspect '{aspect}'; use coherence, consistency or relevance")
        data = check_text_list("data", data)
        if prefix is not None:
            prefix = check_text_list("prefix", prefix)
        if label is not None:
            label = check_text_list("label", label)
        self.engine.max_batch_items = check_positive_int("batch_size", batch_size, allow_none=True)
        try:
            if aspect_name == "coherence":
                return self.coherence(data)[0]
            if aspect_name == "consistency":
                if prefix is None:
                    raise ValueError("consistency needs `prefix`")
                return self.consistency(data, prefix)[0]
            if label is None:
                raise ValueError("relevance needs `label`")
            return self.relevance(data, label)[0]
        except RowError as exc:
            raise ValueError(f"row {exc.row_index}: {exc.reason}") from exc

    def signature_params(self) -> dict[str, Any]:
        params = {
            **self.source.identity(),
            "dtype": self.dtype,
            "max_length": self.max_length,
            "iwf": f"sha256:{file_digest(self.iwf_path)}",
            "sentence_splitter": SPLITTER_IDS[self.sentence_splitter],
            "tokenization": self.tokenization,
            **({"compile": "regional torch.compile of the layers (CUDA)"} if self.compile else {}),
            "batching": self.engine.batching(),
            **library_versions("torch", "transformers"),
        }
        if self.prompts:
            params["prompts"] = f"{len(self.prompts)}:{stable_hash(self.prompts)}"
            params["verbalizers"] = stable_hash([self.verbalizer.labels, self.verbalizer.rows])
        return params


class CTRLEvalMetric(RowMetric):
    """CTRLEval over canonical rows: `ctrleval_<aspect>` for the chosen aspects. Consistency
    reads `prefix`, relevance reads `attribute` (the control label)."""

    name = "ctrleval"
    needs = "text; prefix for consistency; attribute for relevance"
    score_inputs = ASPECT_INPUTS

    def __init__(
        self,
        model: str = "google/pegasus-large",
        iwf: str | None = None,
        aspects: Sequence[str] = ("coherence", "consistency", "relevance"),
        task: str | None = None,
        prompts: str | None = None,
        verbalizers: str | None = None,
        dtype: str = "float32",
        device: str = "cpu",
        max_length: int | None = None,
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        revision: str | None = None,
        cache_dir: str | None = None,
        sentence_splitter: str = DEFAULT_SPLITTER,
        tokenization: str = "slow",
        compile: bool = False,
    ):
        if isinstance(aspects, str):
            aspects = [aspects]
        names = []
        for aspect in aspects:
            if aspect not in ASPECTS:
                raise UsageError(f"aspects: unknown CTRLEval aspect '{aspect}'; use coherence, consistency or relevance")
            names.append(ASPECTS[aspect])
        if not names:
            raise UsageError("aspects: give at least one of coherence, consistency, relevance")
        self.aspects = tuple(dict.fromkeys(names))
        if task is not None:
            if prompts or verbalizers:
                raise UsageError("give either `task` or `prompts` + `verbalizers`, not both")
            prompts, verbalizers = (str(p) for p in ctrleval_task_paths(task))
        if "relevance" in self.aspects and not (prompts and verbalizers):
            raise UsageError("relevance needs `task` (sentiment/topic) or `prompts` and `verbalizers` files")
        self.scorer = CTRLEval(model, iwf=iwf, prompts=prompts, verbalizers=verbalizers, device=device, dtype=dtype,
                               max_length=max_length, token_budget=token_budget, revision=revision, cache_dir=cache_dir,
                               sentence_splitter=sentence_splitter, tokenization=tokenization, compile=compile)
        self.required_columns = ("text",) + (("prefix",) if "consistency" in self.aspects else ()) + (
            ("attribute",) if "relevance" in self.aspects else ())
        self.output_columns = tuple(f"ctrleval_{a}" for a in self.aspects)

    def score_needs(self) -> dict[str, tuple[str, ...]]:
        """Coherence needs the text only, consistency `prefix`, relevance `attribute`."""
        return {f"ctrleval_{a}": tuple(c for c in ASPECT_INPUTS[a] if c != "text") for a in self.aspects}

    def signature(self) -> Signature:
        return Signature(self.name, VERSION, {**self.scorer.signature_params(), "aspects": list(self.aspects)})

    # ----- two stages: prepare (CPU) and score_prepared (device) -------------------------
    def _evaluators_of(self, aspect: str, rows: Sequence[dict[str, Any]]) -> Evaluators:
        texts = [row["text"] for row in rows]
        if aspect == "coherence":
            return self.scorer.coherence_ids(texts)
        if aspect == "consistency":
            return self.scorer.consistency_ids(texts, [row["prefix"] for row in rows])
        return self.scorer.relevance_ids(texts, [row["attribute"] for row in rows])

    def prepare(self, rows: Sequence[dict[str, Any]]) -> "pa.Table":
        """Per chosen aspect (`Evaluators.columns`): `<aspect>_source_ids`
        (`list<list<int32>>`, one id sequence per evaluator of the row); for coherence and
        consistency `<aspect>_target_ids` (`list<list<int32>>`, aligned with the sources) and
        `<aspect>_weights` (`list<float64>`, NISF per evaluator); for relevance
        `relevance_label` (`int32`, the row's label among the verbaliser labels; the label
        word ids are the scorer's own). Then `truncated` (`bool`): any of the row's ids were
        cut to `max_length`, `parsed_tokens` (the warning naming the special-token strings the
        row's text or prefix holds, `scoring.parsed_tokens`), and `skipped`
        (`RowMetric.partial_reason`). A row lacking an
        aspect's column has no evaluators of that aspect. A row that cannot be scored (no
        sentences, a text not starting with its prefix, an unknown label) raises RowError, in
        aspect order."""
        import pyarrow as pa

        columns: dict[str, pa.Array] = {}
        truncated = np.zeros(len(rows), dtype=bool)
        lacking = [self.lacking(row) for row in rows]
        for aspect in self.aspects:
            owners = [i for i, missing in enumerate(lacking) if f"ctrleval_{aspect}" not in missing]
            try:
                evaluators = self._evaluators_of(aspect, [rows[i] for i in owners])
            except RowError as exc:
                raise RowError(owners[exc.row_index], exc.reason) from None
            if len(owners) != len(rows):
                evaluators = evaluators.spread(owners, len(rows))
            columns.update(evaluators.columns(aspect))
            truncated |= evaluators.truncated
        columns["truncated"] = pa.array(truncated, type=pa.bool_())
        columns["parsed_tokens"] = pa.array([self._parsed_note(row, missing) for row, missing in zip(rows, lacking)], type=pa.string())
        columns["skipped"] = pa.array([self.partial_reason(row) for row in rows], type=pa.string())
        return pa.table(columns)

    @property
    def parsed_tokens(self) -> ParsedTokens:
        """The special-token strings this metric's tokenizer parses in a text."""
        return kept_for(self, self.scorer.tokenizer)

    def _parsed_note(self, row: dict[str, Any], lacking: dict[str, str]) -> str | None:
        """The warning naming the special-token strings of the row's text, and of its prefix
        when consistency reads it (`scoring.parsed_tokens`; the attribute is never tokenised:
        its label words are the verbaliser's)."""
        fields = [("text", [row["text"]])]
        if "consistency" in self.aspects and "ctrleval_consistency" not in lacking:
            fields.append(("prefix", [row["prefix"]]))
        return self.parsed_tokens.note(fields)

    def score_prepared(self, table: "pa.Table") -> list[dict[str, Any]]:
        """One engine call per aspect over the whole table (`CTRLEval.aspect_scores`)."""
        results: list[dict[str, Any]] = [{} for _ in range(table.num_rows)]
        if not results:
            return results
        import pyarrow.compute as pc

        self.scorer.engine.max_batch_items = None
        for aspect in self.aspects:
            counts = pc.list_value_length(table.column(f"{aspect}_source_ids")).to_numpy(zero_copy_only=False)
            owners = np.flatnonzero(counts > 0)  # rows with no evaluators of this aspect lack its column
            if len(owners) == 0:
                continue
            part = table if len(owners) == table.num_rows else table.take(owners)
            for i, value in zip(owners, self.scorer.aspect_scores(aspect, Evaluators.from_table(part, aspect))):
                results[i][f"ctrleval_{aspect}"] = value
        skipped = table.column("skipped").to_pylist() if "skipped" in table.column_names else [None] * len(results)
        for result, reason in zip(results, skipped):
            if reason is not None:
                result["skipped"] = reason
        notes = table.column("parsed_tokens").to_pylist() if "parsed_tokens" in table.column_names else [None] * len(results)
        for result, flag, note in zip(results, table.column("truncated").to_pylist(), notes):
            warning = joined(f"truncated to max_length={self.scorer.max_length} tokens" if flag else None, note)
            if warning:
                result["warning"] = warning
        return results

    def score_valid(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        return self.score_prepared(self.prepare(rows))
