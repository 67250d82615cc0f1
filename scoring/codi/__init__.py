"""CoDI-Eval constraint scoring (Chen et al., AAAI 2024; `docs/codi-eval.md`).

Modules: `convert` (instruction sets + responses -> canonical rows with a `constraint` JSON),
`rules` (length / keyword checks), `classifiers` (sentiment, emotion, topic, toxicity with
local HF sequence classifiers), `metric` (`CodiMetric`, the row metric named `codi`),
and the per-row contract; the corpus statistics (task accuracies, the CoDI score, Self-BLEU,
the report) live in `meta_eval.codi`.
"""

TASKS = ("sentiment", "topic", "multi", "length", "keyword", "detoxic")
