"""Model-based and rule-based metrics for controllable text generation.

Each metric is a class with a pure batched `score` method (library use). `scoring.metric`
adapts a metric to canonical rows (`RowMetric`), which is what the CLI and the Ray job call.
"""
