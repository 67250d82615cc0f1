"""Checks for metric parameters and scorer arguments, run when a scorer is built (before any
model loads) so a wrong value is one `UsageError` line naming the parameter, and for the
arguments of the library calls (a string where a list of strings belongs is a `TypeError`).
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

from scoring.errors import UsageError

DTYPES = ("float32", "bfloat16", "float16")


def check_choice(name: str, value: Any, choices: Iterable[str]) -> str:
    choices = tuple(choices)
    if value not in choices:
        raise UsageError(f"{name} must be one of {list(choices)}, not {value!r}")
    return value


def check_choices(name: str, values: Any, choices: Sequence[str], what: str = "") -> tuple[str, ...]:
    """A non-empty tuple of distinct `choices` (one string is a list of one); `UsageError`
    naming the unknown or repeated ones (a choice twice would name its output column twice)."""
    values = (values,) if isinstance(values, str) else tuple(values)
    unknown = [v for v in values if v not in choices]
    if unknown or not values:
        raise UsageError(f"{name}: unknown {what}{name} {unknown}; choose from {list(choices)}")
    repeated = sorted({v for v in values if values.count(v) > 1})
    if repeated:
        raise UsageError(f"{name}: {', '.join(repeated)} given more than once")
    return values


def check_positive_int(name: str, value: Any, allow_none: bool = False) -> int | None:
    """An integer >= 1 (bools and floats such as 2.5 refused; None only when allowed)."""
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise UsageError(f"{name} must be a positive integer, not {value!r}")
    return int(value)


def check_dtype(value: Any) -> str:
    return check_choice("dtype", value, DTYPES)


def check_device(value: Any) -> str:
    """`cpu`, `auto`, `cuda` or `cuda:N`, and CUDA only where torch sees a CUDA device."""
    if not isinstance(value, str):
        raise UsageError(f"device must be a string such as 'cpu', 'cuda', 'cuda:0' or 'auto', not {value!r}")
    base, _, index = value.partition(":")
    if value in ("cpu", "auto") or (base == "cuda" and (not index or index.isdigit())):
        if base == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise UsageError(f"device {value!r} requested but CUDA is not available here; use device='cpu' or 'auto'")
            if index and int(index) >= torch.cuda.device_count():
                raise UsageError(f"device {value!r} requested but only {torch.cuda.device_count()} CUDA device(s) are visible")
        return value
    raise UsageError(f"unknown device {value!r}; use 'cpu', 'cuda', 'cuda:N' or 'auto'")


def check_model_args(dtype: Any, device: Any, token_budget: Any, max_length: Any = None) -> None:
    """The arguments every model scorer shares."""
    check_dtype(dtype)
    check_device(device)
    check_positive_int("token_budget", token_budget)
    check_positive_int("max_length", max_length, allow_none=True)


def check_text_list(name: str, values: Any) -> Sequence[str]:
    """A sequence of strings; a bare string (which would be iterated by character) or a
    non-string item is a TypeError naming the argument."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name} must be a list of strings, not a single string (wrap it: [{name}])")
    try:
        items = list(values)
    except TypeError:
        raise TypeError(f"{name} must be a list of strings, not {type(values).__name__}") from None
    for i, value in enumerate(items):
        if not isinstance(value, str):
            raise TypeError(f"{name}[{i}] must be a string, not {type(value).__name__}")
    return items


def check_text_lists(name: str, values: Any) -> list[list[str]]:
    """A sequence of lists of strings (e.g. references per row)."""
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name} must be a list of lists of strings, not a single string")
    return [list(check_text_list(f"{name}[{i}]", group)) for i, group in enumerate(values)]
