"""Attribute accuracy (CompMCTG, Zhong et al. 2024): per aspect, a Hugging Face sequence
classifier predicts a label for the text; the row scores 1 when it is the row's gold value of
that aspect, 0 otherwise.

acc_a(row) = 1[argmax_l p_a(l | text) = map_a(gold_a(row))], and `attribute_accuracy` is the
mean over the aspects the row carries. The gold value is `attributes[aspect]` (the row's
attribute combination), or `attribute` when one aspect is configured and the row has no
`attributes`. `label_maps` maps gold values to the classifier's label names (or indices);
without an entry, a gold value matches the label of the same name (case-insensitively).
Per-aspect and per-combination accuracy over a dump are report aggregates
(`meta_eval/compmctg.py`).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from scoring.errors import UsageError
from scoring.metric import RowMetric
from scoring.parsed_tokens import joined, note_of
from scoring.signature import Signature, library_versions

VERSION = "1"


def row_attributes(row: Mapping[str, Any]) -> dict[str, str]:
    """The row's attribute combination: its `attributes` map (a dict or Arrow's list of
    pairs), empty when absent."""
    value = row.get("attributes")
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {str(k): v for k, v in value.items() if v is not None}
    return {str(k): v for k, v in value if v is not None}


class AttributeAccuracyMetric(RowMetric):
    """Attribute accuracy per aspect from per-aspect classifiers: columns
    `attribute_accuracy_<aspect>` (1 or 0) and `attribute_accuracy` (their mean)."""

    name = "attribute_accuracy"
    needs = "text; attributes[aspect] for some configured aspect (or attribute, with one aspect)"
    required_columns = ("text",)
    optional_columns = ("attributes", "attribute")

    def __init__(self, classifiers: Mapping[str, str], label_maps: Mapping[str, Mapping[str, Any]] | None = None,
                 dtype: str = "float32", device: str = "cpu", max_length: int | None = None, token_budget: int = 8192,
                 batch_size: int = 32, cache_dir: str | None = None):
        from scoring.codi.classifiers import SequenceClassifier

        if not isinstance(classifiers, Mapping) or not classifiers:
            raise UsageError("classifiers: give a mapping {aspect: model} with at least one aspect")
        label_maps = dict(label_maps or {})
        unknown = [a for a in label_maps if a not in classifiers]
        if unknown:
            raise UsageError(f"label_maps: aspect(s) {unknown} have no classifier")
        self.aspects = tuple(classifiers)
        self.label_maps = {a: dict(label_maps.get(a) or {}) for a in self.aspects}
        self.classifiers = {
            aspect: SequenceClassifier(model, dtype=dtype, device=device, max_length=max_length,
                                       token_budget=token_budget, batch_size=batch_size, cache_dir=cache_dir)
            for aspect, model in classifiers.items()
        }
        self.output_columns = ("attribute_accuracy", *(f"attribute_accuracy_{a}" for a in self.aspects))

    def gold(self, row: Mapping[str, Any]) -> dict[str, str]:
        """Gold value per configured aspect the row carries."""
        attributes = row_attributes(row)
        if not attributes and len(self.aspects) == 1 and row.get("attribute") is not None:
            attributes = {self.aspects[0]: row["attribute"]}
        return {a: str(attributes[a]) for a in self.aspects if a in attributes}

    def missing_column(self, row: dict[str, Any]) -> str | None:
        return None if self.gold(row) else "attributes"

    def validate(self, row: dict[str, Any]) -> str | None:
        reason = super().validate(row)
        if reason is not None:
            return reason
        for aspect, value in self.gold(row).items():
            try:
                self.classifiers[aspect].label_index(value, self.label_maps[aspect])
            except KeyError as exc:
                return f"aspect {aspect!r}: {exc.args[0]}"
        return None

    def signature(self) -> Signature:
        models = {a: c.describe() for a, c in self.classifiers.items()}
        first = next(iter(self.classifiers.values()))
        return Signature(self.name, VERSION, {"classifiers": models, "label_maps": self.label_maps, "dtype": first.dtype_name,
                                              "max_length": {a: c.max_length for a, c in self.classifiers.items()},
                                              "decision": "argmax", **library_versions("torch", "transformers")})

    def score_valid(self, rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        golds = [self.gold(row) for row in rows]
        results: list[dict[str, Any]] = [{} for _ in rows]
        truncated = [False] * len(rows)
        held: list[list[str]] = [[] for _ in rows]  # special-token strings each row's classifiers parse
        for aspect, classifier in self.classifiers.items():
            owners = [i for i, gold in enumerate(golds) if aspect in gold]
            if not owners:
                continue
            logits, flags = classifier.logits([rows[i]["text"] for i in owners])
            predicted = np.argmax(logits, axis=-1)
            for i, label, flag in zip(owners, predicted, flags):
                target = classifier.label_index(golds[i][aspect], self.label_maps[aspect])
                results[i][f"attribute_accuracy_{aspect}"] = float(int(label) == target)
                truncated[i] |= flag
                held[i] += classifier.parsed_tokens.found([rows[i]["text"]])
        for result, flag, strings in zip(results, truncated, held):
            values = [v for k, v in result.items() if k.startswith("attribute_accuracy_")]
            result["attribute_accuracy"] = float(np.mean(values))
            warning = joined("truncated to the classifier's max_length" if flag else None,
                             note_of([("text", list(dict.fromkeys(strings)))]))
            if warning:
                result["warning"] = warning
        return results
