"""The engines' compiled layers under real `torch.compile` backends, on CPU: each packed path
(GPT-2 and Llama packed, BART and PEGASUS packed encoder and decoder, BART source runs) with
its layers compiled as the engines compile them (`compile_model_layers`), scores against the
uncompiled ones, and dynamo's frame and graph-break counters. tests/test_compile_counts.py
does this with a counting backend that runs the traced graphs as they are; this runs the
backends a GPU uses (`inductor` there; `aot_eager` here in seconds, `inductor` in minutes),
so a torch release whose AOT autograd or inductor cannot take the opaque attention ops
(`ctgscore::packed_attention`, `ctgscore::source_run_attention`) fails before a lease.

    PYTHONPATH=. python scripts/compile_backends.py aot_eager inductor

One line per (backend, model, layout); exits 1 when any failed, a score differed by more than
1e-5 relative, a graph broke or a frame fell back to eager.
"""

from __future__ import annotations

import pathlib
import sys
import tempfile
import time

import numpy as np

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CASES = [("gpt2", "packed"), ("llama", "packed"), ("bart", "packed"), ("bart", "source-runs"), ("pegasus", "packed")]


def _engine_run(paths: dict, name: str, layout: str):
    """(model, a function scoring a fixed set of chunk layouts) for one case."""
    from transformers import AutoModelForSeq2SeqLM

    from scoring.engine import CausalLikelihood, Seq2SeqLikelihood
    from tests.test_compile_counts import _causal_calls, _seq2seq_calls
    from tests.test_packed_attention import _causal_model

    if name in ("gpt2", "llama"):
        model = _causal_model(paths, name)
        engine = CausalLikelihood(model, pad_id=0, token_budget=4096)
        engine.packed = True
        calls = _causal_calls(model.config.vocab_size)
        return model, lambda: [total for sequences in calls for total, _ in engine.sequence_nll(sequences)]
    model = AutoModelForSeq2SeqLM.from_pretrained(paths[name]).eval()
    config = model.config
    engine = Seq2SeqLikelihood(model, pad_id=config.pad_token_id, decoder_start_id=config.decoder_start_token_id,
                               token_budget=4096, cross_batch=layout == "source-runs")
    engine.packed_encoder = engine.packed_decoder = layout == "packed"
    engine.source_runs = layout == "source-runs"
    calls = _seq2seq_calls(config)
    return model, lambda: [nll for sources, targets in calls for group in engine.mean_nll(sources, targets) for nll in group]


def check(paths: dict, backend: str, name: str, layout: str) -> bool:
    import torch._dynamo as dynamo

    from scoring.engine_setup import compile_model_layers

    dynamo.reset()
    dynamo.utils.counters.clear()
    start = time.perf_counter()
    try:
        model, run = _engine_run(paths, name, layout)
        want = np.asarray(run())
        compile_model_layers(model, backend=backend)
        got = np.asarray(run())
    except Exception as exc:  # noqa: BLE001 - one line per case, the others still run
        print(f"{backend:10s} {name:8s} {layout:12s} FAILED {type(exc).__name__}: {' '.join(str(exc).split())[:400]}", flush=True)
        return False
    gap = float(np.max(np.abs(got - want) / np.maximum(np.abs(want), 1e-9)))
    frames, breaks = dict(dynamo.utils.counters["frames"]), sum(dynamo.utils.counters["graph_break"].values())
    ok = gap <= 1e-5 and breaks == 0 and frames.get("total", 0) == frames.get("ok", 0) > 0
    print(f"{backend:10s} {name:8s} {layout:12s} {'ok' if ok else 'FAILED'}  max rel. score diff {gap:.1e}  frames {frames}  "
          f"graph breaks {breaks}  {time.perf_counter() - start:.1f} s", flush=True)
    return ok


def main(backends: list[str]) -> int:
    import torch

    from ctgscore.testing import tiny_models

    print(f"torch {torch.__version__}, backends {', '.join(backends)}", flush=True)
    with tempfile.TemporaryDirectory(prefix="compile-backends-") as tmp:
        paths = tiny_models.build_tiny_models(pathlib.Path(tmp))
        results = [check(paths, backend, name, layout) for backend in backends for name, layout in CASES]
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] or ["aot_eager"]))
