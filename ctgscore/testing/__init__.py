"""Fixture builders for tests, benchmarks and the demo (never meaningful scores).

`tiny_models` (seeded tiny PEGASUS, BART, GPT-2 and an IWF table), `tiny_classifier` (tiny
sequence classifiers with a chosen bias) and `codi_synthetic` (a generated CoDI-Eval response
dump). They live outside the library packages: `scoring`, `meta_eval` and `splits` never import
them.
"""
