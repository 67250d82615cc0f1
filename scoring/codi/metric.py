"""`CodiMetric`: the CoDI-Eval constraint check as a row metric (registry name `codi`).

Reads `text` and `constraint` (JSON, see `scoring.codi.convert`). Output columns:
* `codi_success` 1.0 / 0.0: the row's constraint is met. For detoxic rows this is the
  per-continuation check (toxicity < 0.5); the per-context CoDI rule (all 20 continuations of
  a context < 0.5) is an aggregate over rows and lives in `meta_eval.codi`.
* `codi_score`: the judge's probability of the target label (sentiment/emotion softmax,
  topic sigmoid; multi = the smaller of the two) or, for detoxic, the toxicity score;
  null for the rule tasks.
* `codi_words`: whitespace word count of the cleaned response.
* `codi_toxicity`: toxicity score (detoxic rows only).
Rule tasks (length, keyword) need no model; a row whose task needs a judge that is not
configured gets an error naming the missing parameter. Unknown task / missing or malformed
constraint -> error row.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from scoring.codi import TASKS, rules
from scoring.codi import classifiers as clf
from scoring.codi.convert import TASK_ALIASES
from scoring.errors import UsageError
from scoring.metric import RowMetric
from scoring.params import check_choice, check_model_args, check_positive_int
from scoring.parsed_tokens import joined, note_of
from scoring.signature import Signature, library_versions
from scoring.strict_json import DuplicateKey, unique_keys

VERSION = "1"


def parse_constraint(value: Any) -> dict[str, Any]:
    """Constraint dict from the JSON column; ValueError with the reason when malformed: not JSON,
    a key given twice (`json.loads` would keep the last value silently), a number past Python's
    4,300 digits, a task or label of another type than the instruction sets write
    (`scoring.codi.convert`), a length bound that is not a finite number."""
    if isinstance(value, dict):
        constraint = dict(value)
    else:
        try:
            constraint = json.loads(value, object_pairs_hook=unique_keys)
        except DuplicateKey as exc:
            raise ValueError(f"field 'constraint': the key {exc.args[0]!r} is given twice") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"field 'constraint' is not JSON: {exc}") from exc
        except TypeError as exc:
            raise ValueError(f"field 'constraint' is not JSON: {exc}") from exc
        except ValueError:  # an integer of more than 4,300 digits
            raise ValueError("field 'constraint' holds a number too long to read (over 4,300 digits)") from None
        except RecursionError:
            raise ValueError("field 'constraint' nests too deeply to parse") from None
    if not isinstance(constraint, dict):
        raise ValueError("field 'constraint' must be a JSON object")
    task = constraint.get("task")
    if task is None:
        raise ValueError("field 'constraint' has no 'task'")
    if not isinstance(task, str):
        raise ValueError(f"field 'constraint': 'task' must be a string, got {type(task).__name__}")
    task = TASK_ALIASES.get(task, task)
    if task not in TASKS:
        raise ValueError(f"unknown CoDI task {task!r} in field 'constraint' (known: {', '.join(TASKS)})")
    constraint["task"] = task
    needed = {
        "sentiment": ("label",), "topic": ("label",), "multi": ("label1", "label2"),
        "length": ("label",), "keyword": ("label",), "detoxic": (),
    }[task]  # fmt: skip
    for key in needed:
        if key not in constraint or constraint[key] in (None, "", []):
            raise ValueError(f"constraint of task '{task}' lacks '{key}'")
        if task in ("sentiment", "topic", "multi") and not isinstance(constraint[key], str):
            raise ValueError(f"field 'constraint': '{key}' must be a string, got {type(constraint[key]).__name__}")
    if task == "length":
        rules.check_length_label(constraint["label"])
    if task == "keyword":
        _check_keywords(constraint)
    return constraint


def _check_keywords(constraint: dict[str, Any]) -> None:
    """A keyword constraint as the instruction sets write it: `label` a non-empty list of
    keywords (strings holding a word), `anti_label` (hard level) a string."""
    label = constraint["label"]
    if not isinstance(label, list):
        raise ValueError("keyword constraint 'label' must be a list")
    for index, item in enumerate(label):
        if not isinstance(item, str) or not rules.keyword_alternatives(item):
            found = "a blank string" if isinstance(item, str) else "null" if item is None else type(item).__name__
            raise ValueError(f"keyword constraint 'label' must hold keywords (strings); item {index} is {found}")
    anti = constraint.get("anti_label")
    if anti is not None and not isinstance(anti, str):
        raise ValueError(f"keyword constraint 'anti_label' must be a string, got {type(anti).__name__}")


class CodiMetric(RowMetric):
    name = "codi"
    required_columns = ("text", "constraint")
    json_columns = ("constraint",)
    output_columns = ("codi_success", "codi_score", "codi_words", "codi_toxicity")

    def __init__(
        self,
        sentiment_model: str | None = None,
        emotion_model: str | None = None,
        topic_model: str | None = None,
        toxicity_model: str | None = None,
        sentiment_label_map: dict[str, Any] | None = None,
        emotion_label_map: dict[str, Any] | None = None,
        topic_label_map: dict[str, Any] | None = None,
        toxicity_label: str | int = "toxic",
        toxicity_activation: str = "auto",
        topic_threshold: float = 0.5,
        toxicity_threshold: float = 0.5,
        dtype: str = "float32",
        device: str = "cpu",
        max_length: int = 512,
        batch_size: int = 32,
        token_budget: int = 8192,
        clean_responses: bool = True,
        model_cache_dir: str | None = None,
    ):
        check_model_args(dtype, device, token_budget, max_length)
        check_positive_int("batch_size", batch_size)
        check_choice("toxicity_activation", toxicity_activation, ("auto", "sigmoid", "softmax"))
        for name, value in (("topic_threshold", topic_threshold), ("toxicity_threshold", toxicity_threshold)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
                raise UsageError(f"{name} must be a probability between 0 and 1, not {value!r}")
        self.model_specs = {
            "sentiment": sentiment_model,
            "emotion": emotion_model,
            "topic": topic_model,
            "toxicity": toxicity_model,
        }
        self.label_maps = {
            "sentiment": {**clf.DEFAULT_SENTIMENT_MAP, **(sentiment_label_map or {})},
            "emotion": {**clf.DEFAULT_EMOTION_MAP, **(emotion_label_map or {})},
            "topic": {**clf.DEFAULT_TOPIC_MAP, **(topic_label_map or {})},
        }
        self.toxicity_label = toxicity_label
        self.toxicity_activation_requested = toxicity_activation
        self.topic_threshold = float(topic_threshold)
        self.toxicity_threshold = float(toxicity_threshold)
        self.dtype = dtype
        self.device = device
        self.max_length = int(max_length)
        self.batch_size = int(batch_size)
        self.token_budget = int(token_budget)
        self.clean_responses = bool(clean_responses)
        self.model_cache_dir = model_cache_dir
        self._classifiers: dict[str, clf.SequenceClassifier] = {}
        self._load_errors: dict[str, str] = {}
        self._signature: Signature | None = None

    # ----- models --------------------------------------------------------------------------
    def classifier(self, role: str) -> clf.SequenceClassifier:
        if role not in self._classifiers:
            spec = self.model_specs[role]
            if not spec:
                raise ValueError(f"task needs the {role} classifier: set '{role}_model'")
            if role in self._load_errors:
                raise ValueError(self._load_errors[role])
            try:
                self._classifiers[role] = clf.SequenceClassifier(
                    spec,
                    dtype=self.dtype,
                    device=self.device,
                    max_length=self.max_length,
                    clamp_to_table=True,  # one max_length for four classifiers: each keeps to its table
                    token_budget=self.token_budget,
                    batch_size=self.batch_size,
                    cache_dir=self.model_cache_dir,
                )
            except Exception as exc:  # noqa: BLE001 - reported once per row, loaded once
                self._load_errors[role] = f"{role}_model {spec!r} could not be loaded: {type(exc).__name__}: {exc}"
                raise ValueError(self._load_errors[role]) from exc
        return self._classifiers[role]

    @staticmethod
    def sentiment_role(label: str) -> str:
        """The original routes the three polarity labels to the sentiment model and the six
        emotions to the emotion model."""
        if label in clf.SENTIMENT_LABELS:
            return "sentiment"
        if label in clf.EMOTION_LABELS:
            return "emotion"
        raise ValueError(f"sentiment label {rules.short_repr(label)} is neither a polarity {clf.SENTIMENT_LABELS} "
                         f"nor an emotion {clf.EMOTION_LABELS}")

    def _jobs(self, constraint: dict[str, Any]) -> list[tuple[str, str | None]]:
        """(role, instruction-set label) pairs a row needs judged."""
        task = constraint["task"]
        if task == "sentiment":
            return [(self.sentiment_role(constraint["label"]), constraint["label"])]
        if task == "topic":
            return [("topic", constraint["label"])]
        if task == "multi":
            return [("topic", constraint["label1"]), (self.sentiment_role(constraint["label2"]), constraint["label2"])]
        if task == "detoxic":
            return [("toxicity", None)]
        return []

    def _target_index(self, role: str, label: str | None) -> int:
        classifier = self.classifier(role)
        if role == "toxicity":
            if len(classifier.id2label) == 1:
                return 0
            return classifier.label_index("toxicity_label", {"toxicity_label": self.toxicity_label})
        return classifier.label_index(label, self.label_maps[role])

    # ----- contract ------------------------------------------------------------------------
    def validate(self, row: dict[str, Any]) -> str | None:
        for column in self.required_columns:
            if column not in row:
                return f"missing field '{column}'"
            if row[column] is None:
                return f"null field '{column}'"
        if not isinstance(row["text"], str):
            return f"field 'text' must be a string, got {type(row['text']).__name__}"
        try:
            constraint = parse_constraint(row["constraint"])
            for role, label in self._jobs(constraint):
                self._target_index(role, label)
        except (ValueError, KeyError) as exc:
            return str(exc.args[0]) if isinstance(exc, KeyError) else str(exc)
        return None

    def signature(self) -> Signature:
        if self._signature is None:
            models = {}
            for role, spec in self.model_specs.items():
                if spec:
                    models[role] = clf.model_identity(spec, self.model_cache_dir)
            params = {
                "lemmatizer": rules.lemmatizer_name(),
                "clean": "first ':\\n' cut + strip" if self.clean_responses else "none",
                "words": "whitespace",
                "keyword_tokens": rules.WORD_PATTERN.pattern,
                "models": models,
                "label_maps": {role: self.label_maps[role] for role in self.label_maps if role in models},
                "rules": {"sentiment": "argmax", "emotion": "argmax", "topic": f"sigmoid>={self.topic_threshold}",
                          "toxicity": f"{self.toxicity_activation_requested}[{self.toxicity_label}]<{self.toxicity_threshold}"},
                "dtype": self.dtype,
                "max_length": self.max_length,
                "batching": f"sorted-by-length,token_budget={self.token_budget},batch_size={self.batch_size}",
                "libraries": library_versions("torch", "transformers", "tokenizers", "lemminflect"),
            }  # fmt: skip
            self._signature = Signature(self.name, VERSION, params)
        return self._signature

    def score_valid(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        constraints = [parse_constraint(row["constraint"]) for row in rows]
        texts = []
        for row, constraint in zip(rows, constraints):
            raw = row["text"]
            cleaned = rules.clean_response(raw) if self.clean_responses and constraint["task"] != "detoxic" else raw
            texts.append(cleaned)
        results: list[dict[str, Any]] = [
            {"codi_success": None, "codi_score": None, "codi_words": float(rules.count_words(t)), "codi_toxicity": None, "warning": None}
            for t in texts
        ]
        # rule tasks
        for i, constraint in enumerate(constraints):
            task = constraint["task"]
            if task == "length":
                results[i]["codi_success"] = float(rules.check_length(rules.count_words(texts[i]), constraint["label"]))
            elif task == "keyword":
                outcome = rules.check_keywords(texts[i], constraint["label"], constraint.get("anti_label"))
                results[i]["codi_success"] = float(outcome.success)
        # classifier tasks: one batched pass per judge
        requests: dict[str, list[tuple[int, int]]] = {}
        for i, constraint in enumerate(constraints):
            for role, label in self._jobs(constraint):
                requests.setdefault(role, []).append((i, self._target_index(role, label)))
        verdicts: dict[int, list[clf.Judgement]] = {}
        held: dict[int, list[str]] = {}  # special-token strings a row's classifiers parse
        for role, items in requests.items():
            classifier = self.classifier(role)
            logits, truncated = classifier.logits([texts[i] for i, _ in items])
            activation = clf.toxicity_activation(classifier, self.toxicity_activation_requested) if role == "toxicity" else None
            for (i, target), row_logits, cut in zip(items, logits, truncated):
                held.setdefault(i, []).extend(classifier.parsed_tokens.found([texts[i]]))
                if cut:
                    note = f"{role} input truncated to {classifier.max_length} tokens"
                    results[i]["warning"] = note if not results[i]["warning"] else results[i]["warning"] + "; " + note
                if role == "toxicity":
                    score = clf.toxicity_score(row_logits, target, activation)
                    results[i].update(
                        codi_toxicity=score, codi_score=score, codi_success=float(score < self.toxicity_threshold)
                    )
                elif role == "topic":
                    verdicts.setdefault(i, []).append(clf.sigmoid_rule(row_logits, target, self.topic_threshold))
                else:
                    verdicts.setdefault(i, []).append(clf.argmax_rule(row_logits, target))
        for i, judged in verdicts.items():
            results[i]["codi_success"] = float(all(j.success for j in judged))
            results[i]["codi_score"] = min(j.prob for j in judged)
        for i, strings in held.items():  # after the truncation notes (`scoring.parsed_tokens`)
            results[i]["warning"] = joined(results[i]["warning"], note_of([("text", list(dict.fromkeys(strings)))]))
        return results
