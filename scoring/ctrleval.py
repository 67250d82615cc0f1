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
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from scoring.engine import DEFAULT_TOKEN_BUDGET, Seq2SeqLikelihood
from scoring.errors import UsageError
from scoring.iwf import load_iwf
from scoring.metric import RowError, RowMetric
from scoring.models import file_digest, load_pretrained, load_tokenizer, resolve_model
from scoring.params import check_choice, check_model_args, check_positive_int, check_text_list
from scoring.resources import ctrleval_task_paths, resource_path
from scoring.sentences import DEFAULT_SPLITTER, SPLITTER_IDS, SPLITTERS, split_sentences
from scoring.signature import Signature, library_versions, stable_hash
from scoring.text_encoding import TOKENIZATION_STYLES, encode_texts, read_lines

VERSION = "1.1"
MASK = "<mask_1>"
ASPECTS = {"coherence": "coherence", "coh": "coherence", "consistency": "consistency", "cons": "consistency",
           "relevance": "relevance", "rel": "relevance", "ar": "relevance"}


@dataclass(frozen=True)
class Verbalizer:
    """Label names and verbaliser rows (one label word per label in each row)."""

    labels: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]

    @classmethod
    def from_file(cls, path: str | pathlib.Path) -> "Verbalizer":
        """Tab-separated: line 1 = label names, each further line = one word per label."""
        lines = [line.split("\t") for line in read_lines(path, "verbaliser")]
        labels = tuple(cell.strip() for cell in lines[0])
        rows = []
        for number, cells in enumerate(lines[1:], start=2):
            words = tuple(cell.strip() for cell in cells)
            if len(words) != len(labels):
                raise ValueError(f"{path}:{number}: {len(words)} words for {len(labels)} labels")
            rows.append(words)
        if not rows:
            raise ValueError(f"{path}: no verbaliser rows after the label line")
        return cls(labels, tuple(rows))


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
        max_length: int = 1024,
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        revision: str | None = None,
        cache_dir: str | None = None,
        sentence_splitter: str = DEFAULT_SPLITTER,
        tokenization: str = "slow",
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
        self.prompts = _read_param_file("prompts", lambda path: read_lines(path, "prompt"), prompts) if prompts else None
        self.verbalizer = _read_param_file("verbalizers", Verbalizer.from_file, verbalizers) if verbalizers else None
        self.source = resolve_model(model, revision=revision, cache_dir=cache_dir)
        self.tokenizer = load_tokenizer(self.source)
        self.model = load_pretrained(AutoModelForSeq2SeqLM, self.source, dtype=dtype, device=device)
        if len(self.iwf) < len(self.tokenizer):
            raise UsageError(f"iwf: table {iwf} has {len(self.iwf)} entries but the tokenizer of {model} has {len(self.tokenizer)} ids")
        if MASK not in self.tokenizer.get_vocab():
            raise UsageError(f"model: tokenizer of {model} has no sentence mask token {MASK}")
        self.prompt_files = (prompts, verbalizers)
        self.dtype = dtype
        self.max_length = int(max_length)
        self.engine = Seq2SeqLikelihood(
            self.model, pad_id=self.tokenizer.pad_token_id, decoder_start_id=self.model.config.decoder_start_token_id,
            token_budget=token_budget,
        )

    # ----- helpers ----------------------------------------------------------------------
    def _isf(self, ids: Sequence[int]) -> float:
        """ISF (Eq. 6): max IWF over the token ids."""
        return float(max(self.iwf[i] for i in ids))

    def _encode(self, texts: Sequence[str], eos: bool):
        return encode_texts(self.tokenizer, texts, self.max_length, special_tokens=eos, style=self.tokenization)

    # ----- aspects ----------------------------------------------------------------------
    def coherence(self, texts: Sequence[str]) -> tuple[list[float], list[bool]]:
        """Eq. 2-4, 8. Returns scores and per-text truncation flags."""
        sources, targets, owners = [], [], []
        for i, text in enumerate(texts):
            sentences = split_sentences(text, self.sentence_splitter)
            if not sentences:
                raise RowError(i, "text has no sentences")
            for j, sentence in enumerate(sentences):
                sources.append(masked_source(sentences, j))
                targets.append(sentence)
                owners.append(i)
        if not sources:
            return [], []
        encoded_sources = self._encode(sources, eos=True)
        encoded_targets = self._encode(targets, eos=True)
        nll = self.engine.mean_nll([e.ids for e in encoded_sources], [[e.ids] for e in encoded_targets])
        per_text: list[list[tuple[float, float]]] = [[] for _ in texts]
        truncated = [False] * len(texts)
        for owner, row, source, target in zip(owners, nll, encoded_sources, encoded_targets):
            per_text[owner].append((self._isf(target.ids), -row[0]))
            truncated[owner] |= source.truncated or target.truncated
        scores = []
        for evaluators in per_text:
            weights = nisf_weights([isf for isf, _ in evaluators])
            scores.append(sum(w * lm for w, (_, lm) in zip(weights, evaluators)))
        return scores, truncated

    def consistency(self, texts: Sequence[str], prefixes: Sequence[str]) -> tuple[list[float], list[bool]]:
        """Eq. 9-11. A text that does not start with its prefix raises RowError."""
        if len(texts) != len(prefixes):
            raise ValueError(f"{len(texts)} texts but {len(prefixes)} prefixes")
        if not texts:
            return [], []
        sources, targets = [], []
        for i, (text, prefix) in enumerate(zip(texts, prefixes)):
            if not text.startswith(prefix):
                raise RowError(i, f"text does not start with its prefix {prefix!r}")
            remainder = text[len(prefix) :]
            if not remainder.strip():
                raise RowError(i, "text has nothing after its prefix")
            sources += [f"{prefix} {MASK}", f"{MASK} {remainder}"]
            targets += [remainder, prefix]
        encoded_sources = self._encode(sources, eos=True)
        encoded_targets = self._encode(targets, eos=False)
        nll = self.engine.mean_nll([e.ids for e in encoded_sources], [[e.ids] for e in encoded_targets])
        scores, truncated = [], []
        for i in range(len(texts)):
            s1, s2 = -nll[2 * i][0], -nll[2 * i + 1][0]
            w_remainder, w_prefix = nisf_weights([self._isf(encoded_targets[2 * i].ids), self._isf(encoded_targets[2 * i + 1].ids)])
            scores.append(w_remainder * s1 + w_prefix * s2)
            truncated.append(any(e.truncated for e in encoded_sources[2 * i : 2 * i + 2] + encoded_targets[2 * i : 2 * i + 2]))
        return scores, truncated

    def relevance(self, texts: Sequence[str], labels: Sequence[str]) -> tuple[list[float], list[bool]]:
        """Eq. 12-17: one encoder pass per (text, prompt), all label words decoded against it."""
        if self.prompts is None or self.verbalizer is None:
            raise ValueError("attribute relevance needs prompts and verbalizers")
        if len(texts) != len(labels):
            raise ValueError(f"{len(texts)} texts but {len(labels)} labels")
        if not texts:
            return [], []
        label_names = self.verbalizer.labels
        for i, label in enumerate(labels):
            if label not in label_names:
                raise RowError(i, f"label {label!r} is not one of the verbaliser labels {list(label_names)}")
        words = [word for row in self.verbalizer.rows for word in row]
        word_ids = [e.ids for e in self._encode(words, eos=False)]
        filled = [p.replace("<gen_result>", text).replace("<mask_token>", MASK) for text in texts for p in self.prompts]
        encoded_sources = self._encode(filled, eos=True)
        nll = self.engine.mean_nll([e.ids for e in encoded_sources], [word_ids] * len(filled))
        n_prompts, n_rows, n_labels = len(self.prompts), len(self.verbalizer.rows), len(label_names)
        scores, truncated = [], []
        for i, label in enumerate(labels):
            block = np.asarray(nll[i * n_prompts : (i + 1) * n_prompts], dtype=np.float64)
            s = np.exp(-block).reshape(n_prompts * n_rows, n_labels)  # evaluators x labels
            scores.append(relevance_from_likelihoods(s, label_names.index(label)))
            truncated.append(any(e.truncated for e in encoded_sources[i * n_prompts : (i + 1) * n_prompts]))
        return scores, truncated

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
            "batching": f"length-sorted,token_budget={self.engine.token_budget},decode_token_budget={self.engine.decode_token_budget}",
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
        max_length: int = 1024,
        token_budget: int = DEFAULT_TOKEN_BUDGET,
        revision: str | None = None,
        cache_dir: str | None = None,
        sentence_splitter: str = DEFAULT_SPLITTER,
        tokenization: str = "slow",
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
                               sentence_splitter=sentence_splitter, tokenization=tokenization)
        self.required_columns = ("text",) + (("prefix",) if "consistency" in self.aspects else ()) + (
            ("attribute",) if "relevance" in self.aspects else ())
        self.output_columns = tuple(f"ctrleval_{a}" for a in self.aspects)

    def signature(self) -> Signature:
        return Signature(self.name, VERSION, {**self.scorer.signature_params(), "aspects": list(self.aspects)})

    def score_valid(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        texts = [row["text"] for row in rows]
        results: list[dict[str, Any]] = [{} for _ in rows]
        truncated = [False] * len(rows)
        for aspect in self.aspects:
            if aspect == "coherence":
                scores, flags = self.scorer.coherence(texts)
            elif aspect == "consistency":
                scores, flags = self.scorer.consistency(texts, [row["prefix"] for row in rows])
            else:
                scores, flags = self.scorer.relevance(texts, [row["attribute"] for row in rows])
            for i, (value, flag) in enumerate(zip(scores, flags)):
                results[i][f"ctrleval_{aspect}"] = value
                truncated[i] |= flag
        for i, flag in enumerate(truncated):
            if flag:
                results[i]["warning"] = f"truncated to max_length={self.scorer.max_length} tokens"
        return results
