"""The tokenizers library's Rust tokenizer behind a guard: each call that runs a tokenizer.json's
normalizer, pre-tokenizer or decoder on text holds stderr back (`scoring.held_stderr`), so a
panic inside Rust (a pre-tokenizer regex past Oniguruma's retry limit) reaches the caller as
pyo3's `PanicException`, whose text then names the panic's location, and Rust's panic report
never reaches the console. Everything else is passed through to the Rust object unchanged."""

from __future__ import annotations

from typing import Any

from scoring.held_stderr import held_stderr

# the methods of `tokenizers.Tokenizer` that run the pipeline on text or ids
GUARDED = frozenset({
    "encode", "encode_batch", "encode_batch_fast", "decode", "decode_batch", "post_process",
})


def quiet_tokenizer(tokenizer: Any) -> Any:
    """`tokenizer` (a transformers tokenizer) with its Rust backend wrapped in place, if it has
    one (transformers' Python tokenizers have none and are returned as they are)."""
    backend = tokenizer.__dict__.get("_tokenizer")
    if backend is not None and not isinstance(backend, QuietBackend) and type(backend).__module__.startswith("tokenizers"):
        tokenizer._tokenizer = QuietBackend(backend)
    return tokenizer


class QuietBackend:
    """A `tokenizers.Tokenizer` whose pipeline calls run with stderr held back; attribute reads
    and writes (`encode_special_tokens`, `truncation`, ...) go to the Rust object."""

    __slots__ = ("_rust",)

    def __init__(self, rust: Any) -> None:
        object.__setattr__(self, "_rust", rust)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._rust, name)
        return _Guarded(value) if name in GUARDED else value

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._rust, name, value)

    def __reduce__(self):
        return QuietBackend, (self._rust,)

    def __repr__(self) -> str:
        return f"QuietBackend({self._rust!r})"


class _Guarded:
    """One bound method of the Rust tokenizer, called with stderr held back."""

    __slots__ = ("_method",)

    def __init__(self, method: Any) -> None:
        self._method = method

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        try:
            with held_stderr() as held:
                return self._method(*args, **kwargs)
        except BaseException as exc:
            if type(exc).__name__ != "PanicException" or not held.panics:
                raise
            raise type(exc)(f"{exc} (panicked at {held.panics[0].location})") from exc
