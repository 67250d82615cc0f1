"""CoDI-Eval constraint scoring (Chen et al., AAAI 2024; spec: ../shared/spec/codi-eval.md).

Modules: `convert` (instruction sets + responses -> canonical rows with a `constraint` JSON),
`rules` (length / keyword checks), `classifiers` (sentiment, emotion, topic, toxicity with
local HF sequence classifiers), `metric` (`CodiMetric`, the row metric named `codi`),
`aggregate` (task accuracies, the CoDI score, Self-BLEU, the report), `cli`
(`ctgscore constraints ...`).
"""

TASKS = ("sentiment", "topic", "multi", "length", "keyword", "detoxic")
