"""gptscore: prompted continuation likelihood under tiny random decoder LLMs of every family
(Llama with GQA and no pad token, Qwen2 without BOS, Mistral and Gemma 2 with sliding windows
shorter than the prompts, Gemma 2's soft-capped logits through the model's own head, GPT-2),
against a naive per-row prompt + continuation loop; the shared-prompt path against independent
forwards; templates, chat wrapping, long rows; the CLI and the job."""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from ctgscore.testing.tiny_llms import FAMILIES, build_decoder, build_llm_tokenizer
from scoring.engine import Ragged
from scoring.errors import UsageError
from scoring.registry import build_metric

SOURCE = "The council met on Monday and approved the new budget for the city schools after a long debate about costs."
ROWS = [
    {"id": f"r{i}", "text": text, "source": SOURCE if i < 4 else "A storm closed the harbour for two days.",
     "references": ["The council approved the school budget.", "After debate, the budget passed."][: 1 + i % 2]}
    for i, text in enumerate([
        "The council approved the budget.", "A budget for schools was approved on Monday.", "The city debated costs.",
        "Schools get a new budget.", "The harbour was closed by a storm.", "Boats stayed in for two days."])
]
TEMPLATES = {"fluency": "Text:\n{input}\nA fluent summary:\n",
             "relevance": {"s_h": "Text:\n{input}\nThe key points:\n", "r_h": "Reference:\n{input}\nSummary:\n",
                           "h_r": "Summary:\n{input}\nReference:\n"}}


@pytest.fixture(scope="module")
def llms(tmp_path_factory) -> dict[str, str]:
    """One tiny model per family, 512 positions, sharing one tokenizer (Qwen2: no BOS)."""
    root = tmp_path_factory.mktemp("tiny-llms")
    shared = build_llm_tokenizer(root / "tokenizer")
    return {family: str(build_decoder(family, root / family, seed=i, tokenizer=None if family == "qwen2" else shared))
            for i, family in enumerate(FAMILIES)}


def naive_logprob(model, prompt_ids: list[int], continuation_ids: list[int]) -> tuple[float, float]:
    """(mean, sum) of log p(continuation | prompt): one unpadded forward of prompt + continuation."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt_ids + continuation_ids])).logits[0].float()
    logprobs = torch.log_softmax(logits, dim=-1)
    total = sum(logprobs[len(prompt_ids) - 1 + t, c].item() for t, c in enumerate(continuation_ids))
    return total / len(continuation_ids), total


def naive_row(metric, row) -> dict[str, float]:
    """Every column of one row by the definition (G1, directions, agg = mean), pair by pair."""
    scorer, model = metric.scorer, metric.scorer.model
    def score(aspect, group, x, y):
        prompt = scorer.prompt_ids([metric.templates[aspect][group].replace("{input}", x)])[0]
        return naive_logprob(model, prompt, scorer.continuation_ids([y])[0])[0]
    out = {}
    for aspect in metric.aspects:
        refs = row["references"]
        out[f"gptscore_{aspect}_s_h"] = score(aspect, "s_h", row["source"], row["text"])
        precision = [score(aspect, "r_h", r, row["text"]) for r in refs]
        recall = [score(aspect, "h_r", row["text"], r) for r in refs]
        out[f"gptscore_{aspect}_r_h"] = sum(precision) / len(refs)
        out[f"gptscore_{aspect}_h_r"] = sum(recall) / len(refs)
        out[f"gptscore_{aspect}_f"] = sum((p + r) / 2 for p, r in zip(precision, recall)) / len(refs)
    return out


@pytest.mark.timeout(300)
@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_matches_a_naive_loop_and_independent_forwards(llms, family):
    params = {"model": llms[family], "templates": TEMPLATES, "directions": ["s_h", "r_h", "h_r", "f"], "token_budget": 256}
    shared = build_metric("gptscore", params)
    independent = build_metric("gptscore", {**params, "share_prompts": False})
    got, reference = shared.score_rows(ROWS), independent.score_rows(ROWS)
    assert all(r["error"] is None for r in got + reference), got
    for row, result, other in zip(ROWS, got, reference):
        expected = naive_row(shared, row)
        assert set(expected) == set(shared.output_columns)
        for column, value in expected.items():
            assert result[column] == pytest.approx(value, abs=1e-5), (family, column)
            # float32: the two paths round differently (batch shapes), within 1e-6 relative
            # (|score| ~ 10 nats here, where one float32 ulp is 9.5e-7)
            assert abs(result[column] - other[column]) <= 1e-6 * max(1.0, abs(other[column])), (family, column)
    engine = shared.scorer.engine
    # 4 rows share one source: far fewer prompt tokens run than independent forwards would run
    assert engine.stats["prompt_tokens_computed"] < 0.6 * engine.stats["prompt_tokens_requested"]
    assert independent.scorer.engine.stats["prompt_tokens_computed"] == independent.scorer.engine.stats["prompt_tokens_requested"]
    signature = shared.signature_string()
    for part in ("metric:gptscore", f"model:{family}", "revision:sha256:", "templates:2:", "max_length:512", "dtype:float32"):
        assert part in signature, (part, signature)


@pytest.mark.parametrize("family", ["llama", "gemma2"])
def test_shared_prompts_equal_independent_forwards_exactly_in_float64(llms, family):
    """In float64 the cached path is the same computation as the independent one: what is left
    in float32 is rounding, not a shifted position or a leaked pad."""
    from transformers import AutoModelForCausalLM

    from scoring.prompt_cache import PromptedLikelihood

    model = AutoModelForCausalLM.from_pretrained(llms[family]).eval().double()
    generator = torch.Generator().manual_seed(0)
    base = torch.randint(3, 990, (40,), generator=generator).tolist()
    prompts, continuations = [], []
    for prompt in (base[:30], base, base[:30] + [5, 6, 7], [9, 9, 9], base[:12]):
        for n in (1, 4, 11):
            prompts.append(prompt)
            continuations.append(torch.randint(3, 990, (n,), generator=generator).tolist())
    prompts.append([4, 5])
    continuations.append([6, 7, 8])
    results = {}
    for share in (True, False):
        engine = PromptedLikelihood(model, pad_id=0, share_prompts=share, token_budget=128)
        results[share] = engine.continuation_logprobs(Ragged.from_lists(prompts), Ragged.from_lists(continuations))
        if share:
            # a prefix tree over the distinct prompts of 12, 30, 33 and 40 tokens: 11 tokens shared
            # by all (one short of the shortest), the 12-token prompt's last 1, then 18 more shared
            # by the other three (29, one short of 30), then their own 1, 4 and 11; [9, 9, 9] runs
            # once for its 3 continuations; the lone 2-token prompt runs with its one continuation
            assert engine.stats["prompt_tokens_computed"] == 11 + 1 + 18 + 1 + 4 + 11 + 3 + 2
            assert engine.stats["prompt_tokens_requested"] == sum(len(p) for p in prompts)
    for (a, n), (b, m) in zip(results[True], results[False]):
        assert n == m and abs(a - b) <= (1e-9 if family == "llama" else 1e-5)
    for (total, _), prompt, continuation in zip(results[True], prompts, continuations):
        assert total == pytest.approx(naive_logprob(model, prompt, continuation)[1], rel=1e-6)  # logits in float32


def test_prefix_runs_share_at_least_the_minimum_and_leave_each_prompt_a_token():
    import numpy as np

    from scoring.prompt_cache import prefix_runs

    prompts = [np.array(p) for p in ([1, 2, 3, 4, 5], [1, 2, 3, 4, 6, 7], [9, 9], [1, 2, 3, 4, 5, 8], [1, 2])]
    order = sorted(range(len(prompts)), key=lambda u: prompts[u].tolist())
    assert prefix_runs(prompts, order, 0, 3) == [([4], 0), ([0, 3, 1], 4), ([2], 0)]
    # one level down: past the shared 4 tokens, [1 2 3 4 5] and [1 2 3 4 5 8] share one more, under the minimum
    assert prefix_runs(prompts, [0, 3, 1], 4, 1) == [([0], 4), ([3], 4), ([1], 4)]
    # a prefix equal to a whole prompt stops one token short of it
    assert prefix_runs([np.array([1, 2, 3]), np.array([1, 2, 3, 4])], [0, 1], 0, 1) == [([0, 1], 2)]


def test_sum_reduction_chat_template_and_separate_tokenisation(llms):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = llms["llama"]
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    metric = build_metric("gptscore", {"model": path, "templates": {"plain": "{input}\nSummary:\n"}, "reduction": "sum",
                                       "chat_template": True})
    prompt = "A storm closed the harbour.\nSummary:\n"
    wrapped = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True)
    assert wrapped.startswith("<s><|user|>\n") and wrapped.endswith("<|assistant|>\n")
    prompt_ids = tokenizer(wrapped, add_special_tokens=False)["input_ids"]
    assert metric.scorer.prompt_ids([prompt]) == [prompt_ids] and prompt_ids[0] == tokenizer.bos_token_id
    continuation = tokenizer("Boats stayed in.", add_special_tokens=False)["input_ids"]
    row = {"id": "x", "text": "Boats stayed in.", "source": "A storm closed the harbour."}
    result = metric.score_rows([row])[0]
    assert result["gptscore_plain_s_h"] == pytest.approx(naive_logprob(model, prompt_ids, continuation)[1], abs=1e-5)
    assert "chat_template:" in metric.signature_string() and "reduction:sum" in metric.signature_string()
    plain = build_metric("gptscore", {"model": path, "templates": {"plain": "{input}\nSummary:\n"}})
    assert plain.scorer.prompt_ids([prompt])[0][0] == tokenizer.bos_token_id  # BOS, then the prompt's own ids
    # GPT-2-like tokenizers without a chat template are refused when asked for one
    tokenizer.chat_template = None
    tokenizer.save_pretrained(path + "-nochat")
    model.save_pretrained(path + "-nochat")
    with pytest.raises(UsageError, match="no chat template"):
        build_metric("gptscore", {"model": path + "-nochat", "chat_template": True})


def test_templates_rows_past_the_context_and_skips(llms, tmp_path):
    with pytest.raises(UsageError, match="holding \\{input\\}"):
        build_metric("gptscore", {"model": llms["gpt2"], "templates": {"fluency": "no placeholder"}})
    with pytest.raises(UsageError, match="lower-case identifier"):
        build_metric("gptscore", {"model": llms["gpt2"], "templates": {"<b>x</b>": "{input}"}})
    with pytest.raises(UsageError, match="no such template set or file"):
        build_metric("gptscore", {"model": llms["gpt2"], "templates": str(tmp_path / "missing.json")})
    with pytest.raises(UsageError, match="max_length 1024 is past the position table"):
        build_metric("gptscore", {"model": llms["gpt2"], "max_length": 1024})
    default = build_metric("gptscore", {"model": llms["gpt2"]})
    assert default.output_columns == tuple(f"gptscore_{a}_s_h" for a in ("coherence", "consistency", "fluency", "relevance"))
    metric = build_metric("gptscore", {"model": llms["mistral"], "templates": TEMPLATES, "aspects": ["fluency"]})
    rows = [dict(ROWS[0]), dict(ROWS[1], source=" ".join(["word"] * 600)), {"id": "c", "text": "no source here"},
            dict(ROWS[2], text="{input} braces stay as they are")]
    out = metric.score_rows(rows)
    assert out[0]["error"] is None and out[0]["gptscore_fluency_s_h"] < 0
    assert "is longer than max_length 512" in out[1]["error"] and out[1]["gptscore_fluency_s_h"] is None
    assert out[2]["skipped"] == "no source" and out[2]["error"] is None
    assert out[3]["error"] is None and math.isfinite(out[3]["gptscore_fluency_s_h"])


@pytest.mark.timeout(300)
def test_cli_scores_with_gptscore(llms, tmp_path):
    from ctgscore.testing.cli import run_cli

    source = tmp_path / "rows.parquet"
    pq.write_table(pa.Table.from_pylist([{k: r[k] for k in ("id", "text", "source")} for r in ROWS]), source)
    proc = run_cli(["score", "-m", "gptscore", "--param", f"model={llms['qwen2']}", "--param", "aspects=fluency",
                    "-i", source, "-o", tmp_path / "out.parquet"])
    assert proc.returncode == 0, proc.stderr
    out = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert [r["id"] for r in out] == [r["id"] for r in ROWS] and all(r["gptscore_fluency_s_h"] < 0 for r in out)
    proc = run_cli(["score", "-m", "gptscore", "--param", f"model={llms['qwen2']}", "--param", "max_length=4096",
                    "-i", source, "-o", tmp_path / "refused.parquet"])
    assert proc.returncode == 2 and "max_length 4096 is past the position table" in proc.stderr


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_job_scores_a_mixed_dump_with_gptscore(ray_local, llms, sample_corpus, tmp_path):
    from ray_jobs.config import parse_config
    from ray_jobs.score_corpus import run_job
    from tests.job_support import shard_rows

    summ = pq.read_table(sample_corpus / "summeval-00000.parquet").slice(0, 6).to_pylist()
    ctrl = pq.read_table(sample_corpus / "ctrleval_senti-00000.parquet").slice(0, 4).to_pylist()
    schema = pq.read_schema(sample_corpus / "summeval-00000.parquet")
    (tmp_path / "in").mkdir()
    rows = [{k: row.get(k) for k in schema.names} for row in summ[:3] + ctrl + summ[3:]]
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), tmp_path / "in" / "mixed.parquet")
    metric = {"name": "gptscore", "params": {"model": llms["llama"], "templates": TEMPLATES, "directions": ["s_h", "h_r"],
                                             "max_length": 512}}
    config = parse_config({"input": str(tmp_path / "in"), "output": str(tmp_path / "out"), "metrics": [metric],
                           "progress": False, "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5}})
    report = run_job(config)["metrics"]["gptscore"]
    assert (report["rows_out"], report["rows_skipped"]) == (10, 4)
    out = shard_rows(tmp_path / "out" / "gptscore", "mixed.parquet")
    library_metric = build_metric("gptscore", metric["params"])
    library, out_columns = library_metric.score_rows(rows), library_metric.output_columns
    for row, got, expected in zip(rows, out, library):
        if row["dataset"] != "summeval":
            # a CTRLEval row has neither input: every direction skipped, each with what it lacked
            assert got["error"] is None and all(got[c] is None for c in out_columns)
            assert got["skipped"] == "fluency_s_h, relevance_s_h: no source; fluency_h_r, relevance_h_r: no references"
        elif expected["error"] is None:
            assert got["error"] is None and got["gptscore_fluency_h_r"] == pytest.approx(expected["gptscore_fluency_h_r"], abs=1e-6)
        else:  # a SummEval article past the 512-token context: the row's error, the same in the job
            assert got["error"] == expected["error"] and "max_length 512" in got["error"]


def test_out_of_memory_splits_a_continuation_batch_and_the_budget_counts_the_prompt(llms):
    from transformers import AutoModelForCausalLM

    from scoring.prompt_cache import PromptedLikelihood

    model = AutoModelForCausalLM.from_pretrained(llms["llama"]).eval()
    prompts = [list(range(3, 43))] * 6
    continuations = [list(range(50, 50 + n)) for n in (3, 9, 5, 7, 2, 8)]
    expected = PromptedLikelihood(model, pad_id=0).continuation_logprobs(Ragged.from_lists(prompts), Ragged.from_lists(continuations))
    engine = PromptedLikelihood(model, pad_id=0, token_budget=10_000)
    forward = engine._forward

    def failing(input_ids, attention_mask, cache, last_only):
        if cache is not None and input_ids.shape[0] > 2:  # continuation batches of more than 2 rows
            raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return forward(input_ids, attention_mask, cache, last_only)

    engine._forward = failing
    got = engine.continuation_logprobs(Ragged.from_lists(prompts), Ragged.from_lists(continuations))
    assert engine.stats["oom_splits"] >= 2 and engine.stats["prompt_passes"] == 1
    assert [n for _, n in got] == [n for _, n in expected]
    assert all(abs(a - b) <= 1e-5 * max(1.0, abs(b)) for (a, _), (b, _) in zip(got, expected))
    # the budget counts prompt + continuation tokens per row: 40 + 9 = 49 per row, so 100 tokens fit 2 rows
    narrow = PromptedLikelihood(model, pad_id=0, token_budget=100)
    narrow.continuation_logprobs(Ragged.from_lists(prompts), Ragged.from_lists(continuations))
    assert narrow.stats["continuation_passes"] == 3


def test_a_row_gets_each_direction_its_columns_allow(llms):
    """A row with a source and no references gets its s_h scores (equal to an s_h-only run),
    `skipped` naming only the directions it lacked; a row with references and no source gets
    r_h, h_r and F; the prepared (job) path says the same."""
    params = {"model": llms["gpt2"], "templates": TEMPLATES, "directions": ["s_h", "r_h", "h_r", "f"]}
    metric = build_metric("gptscore", params)
    only_s_h = build_metric("gptscore", {**params, "directions": ["s_h"]})
    no_refs = {**ROWS[0], "references": None}
    empty_refs = {**ROWS[1], "references": []}
    no_source = {**ROWS[2], "source": None}
    full, a, b, c = metric.score_rows([ROWS[3], no_refs, empty_refs, no_source])
    alone = only_s_h.score_rows([no_refs, empty_refs])
    for got, want in zip((a, b), alone):
        assert got["error"] is None
        for aspect in ("fluency", "relevance"):
            assert got[f"gptscore_{aspect}_s_h"] == pytest.approx(want[f"gptscore_{aspect}_s_h"], rel=1e-6)
            assert got[f"gptscore_{aspect}_r_h"] is None and got[f"gptscore_{aspect}_f"] is None
        assert got["skipped"].endswith(": no references") and "s_h" not in got["skipped"]
        assert "relevance_h_r" in got["skipped"]
    assert c["error"] is None and c["gptscore_fluency_s_h"] is None and c["gptscore_relevance_f"] is not None
    assert c["skipped"] == "fluency_s_h, relevance_s_h: no source"
    assert full["skipped"] is None and all(full[column] is not None for column in metric.output_columns)
    prepared = metric.score_prepared(metric.prepare([no_refs, ROWS[3]]))
    assert prepared[0]["skipped"] == a["skipped"] and "skipped" not in prepared[1]
    assert prepared[0]["gptscore_fluency_s_h"] == pytest.approx(a["gptscore_fluency_s_h"], rel=1e-6)
    assert set(metric.score_needs().values()) == {("source",), ("references",)}


def test_chat_template_prompt_past_max_length_is_refused_from_its_head(llms, monkeypatch):
    """With `chat_template: true` the frame tokenised a whole 1 MB source (seconds a row) only
    for the row to be refused as too long; the head settles it now, the frame never sees it, and
    a prompt of ordinary length is framed as before."""
    metric = build_metric("gptscore", {"model": llms["llama"], "templates": {"plain": "{input}\nSummary:\n"},
                                       "chat_template": True})
    frame, seen = metric.scorer.frame, []
    encode = frame.encode
    monkeypatch.setattr(frame, "encode", lambda contents: seen.extend(contents) or encode(contents))
    long_source = "the cat sat on the mat . " * 40_000  # 1,000,000 characters
    rows = [{"id": "good", "text": "Boats stayed in.", "source": "A storm closed the harbour."},
            {"id": "long", "text": "Boats stayed in.", "source": long_source}]
    good, long = metric.score_rows(rows)
    assert good["error"] is None and math.isfinite(good["gptscore_plain_s_h"])
    assert "prompt (more than 520 tokens)" in long["error"] and "longer than max_length 512" in long["error"]
    assert seen and max(len(content) for content in seen) < 1_000
