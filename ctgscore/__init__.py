"""ctgscore: distributed batch scoring and meta-evaluation for controllable text generation.

`ctgscore.load_scores(path)` reads scores back as one table; the command line is `ctgscore`
(`ctgscore.cli.main.main`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

__version__ = "0.1.0"

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["__version__", "load_scores"]


def load_scores(path, metrics=None, *, storage_options=None) -> "pd.DataFrame":
    """Scores under `path` (local or `s3://`) as one wide DataFrame, one row per `id`.

    See `ctgscore.scores.load_scores` for the layout it reads and the columns it returns.
    """
    from ctgscore.scores import load_scores as load

    return load(path, metrics=metrics, storage_options=storage_options)
