"""The tanh approximation of GELU as one kernel.

GPT-2 (``gelu_new``), GPT-J, Phi, CodeGen and other families build their activation from
Python: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), seven or eight elementwise kernels,
each reading and writing the whole feed-forward activation (4d wide). On an H200, GPT-2-large
perplexity spent 125 ms of a 292 ms call in elementwise kernels, most of it there
(benchmarks/results/gpu-check-h200-2026-11-28-packed). `torch.nn.functional.gelu(x,
approximate="tanh")` computes the same function in one kernel, its intermediates in float32
(tests/test_fused_activations.py: within 1e-6 relative in float32).
"""

from __future__ import annotations

import torch
from torch import nn
from transformers.activations import FastGELUActivation, NewGELUActivation

# transformers' Python spellings of the tanh approximation (`gelu_new`, `gelu_fast`); the same
# function, written x * 0.7978845608 * (1 + 0.044715 x^2) in the second. Subclasses are not
# matched: they may change the function.
PYTHON_TANH_GELU = (NewGELUActivation, FastGELUActivation)


class TanhGELU(nn.Module):
    """GELU, tanh approximation, one kernel."""

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return nn.functional.gelu(hidden, approximate="tanh")


def fuse_tanh_gelu(model: nn.Module) -> int:
    """Replace, in place, every module whose type is one of `PYTHON_TANH_GELU` by `TanhGELU`;
    returns how many were replaced (0 for models whose activation is already one kernel:
    BART's `gelu`, PEGASUS's `relu`, Llama's `silu`)."""
    found = [(name, module) for name, module in model.named_modules(remove_duplicate=False) if type(module) in PYTHON_TANH_GELU]
    for name, _ in found:
        parent_name, _, attribute = name.rpartition(".")
        setattr(model.get_submodule(parent_name) if parent_name else model, attribute, TanhGELU())
    return len(found)


def one_kernel_gelus(model: nn.Module) -> int:
    """How many `TanhGELU` modules `model` runs, whoever swapped them in: what the engines
    report and sign (a second engine on a model an earlier one fused computes fused too)."""
    return sum(type(module) is TanhGELU for module in model.modules())
