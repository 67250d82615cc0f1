"""Transitional alias: the tiny-model builders live in `ctgscore.testing.tiny_models`.

Kept only until the test fixtures import from there; nothing in the library uses it.
"""

from __future__ import annotations


def build_tiny_models(*args, **kwargs):
    from ctgscore.testing.tiny_models import build_tiny_models as build

    return build(*args, **kwargs)
