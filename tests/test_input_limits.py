"""Hostile input stays contained: a pathological cell is one row error (`scoring.limits`), an
inflating Parquet file is refused naming its sizes, names and outputs stay inside their folder,
and every printed URL is redacted (`scoring.redact`)."""

from __future__ import annotations

import json
import os
import pathlib
import time
import tracemalloc

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctgscore.testing.cli import assert_user_error
from scoring import limits
from scoring.errors import one_line
from scoring.redact import redact_text, redact_url
from scoring.registry import build_metric

REPO = pathlib.Path(__file__).resolve().parent.parent
NESTED = "[" * 100_000 + "]" * 100_000
BIG_TEXT = "word " * 10_000_000  # 50 MB
MANY_REFERENCES = ["a reference"] * 1_000_000


def _length_constraint(low: int, high: int) -> str:
    return json.dumps({"task": "length", "label": [low, high]})


def _measured(call):
    """(result, CPU seconds this process spent, peak bytes Python allocated) of `call()`: CPU
    time, not wall time, so a guard against a pathological parse does not trip on a machine
    whose cores other test workers share."""
    tracemalloc.start()
    start = time.process_time()
    try:
        result = call()
        return result, time.process_time() - start, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ----- redaction ---------------------------------------------------------------------------
@pytest.mark.parametrize(("url", "secrets", "kept"), [
    ("s3://AKIAIOSFODNN7EXAMPLE:abc/def+ghi@bucket/k", ["AKIAIOSFODNN7EXAMPLE", "abc/def+ghi"], "s3://***@bucket/k"),
    ("s3://KEY:SECRET@bucket/run/part-0.parquet", ["KEY", "SECRET"], "s3://***@bucket/run/part-0.parquet"),
    ("http://user:pass@head:8265/api", ["user", "pass"], "http://***@head:8265/api"),
    ("https://h/x?token=t0ken&page=2", ["t0ken"], "https://h/x?token=***&page=2"),
    ("https://b.s3.amazonaws.com/k?X-Amz-Credential=AKIA%2F20240101&X-Amz-Signature=f00d&X-Amz-Security-Token=IQo",
     ["AKIA%2F20240101", "f00d", "IQo"], "X-Amz-Signature=***"),
    ("https://acct.blob.core.windows.net/c/b?sv=2022-11-02&sig=abc%2Fdef%3D", ["abc%2Fdef"], "sv=2022-11-02&sig=***"),
])  # fmt: skip
def test_redaction_removes_userinfo_and_query_secrets(url, secrets, kept):
    redacted = redact_url(url)
    for secret in secrets:
        assert secret not in redacted
    assert kept in redacted
    line = one_line(f"input {url}: cannot read it")  # every one-line error goes through it
    assert all(secret not in line for secret in secrets) and kept in line


@pytest.mark.parametrize("url", ["s3://bucket/prefix/a@b.parquet", "https://host:8443/path@x", "http://127.0.0.1:8265",
                                 "/data/dump.parquet", None, ""])
def test_redaction_keeps_urls_without_secrets(url):
    assert redact_url(url) == url
    if url:
        assert redact_text(f"see {url} now") == f"see {url} now"


def test_the_job_config_refuses_credentials_in_urls_and_prints_none(tmp_path):
    from ray_jobs.config import ConfigError, parse_config

    with pytest.raises(ConfigError) as caught:
        parse_config({"input": "s3://AKIAEXAMPLE:abc/def+ghi@bucket/in", "output": str(tmp_path / "out"),
                      "metrics": [{"name": "text_stats"}]})
    assert "abc/def+ghi" not in str(caught.value) and "AKIAEXAMPLE" not in str(caught.value)
    assert "carries credentials" in str(caught.value)


# ----- per-cell caps, library path -----------------------------------------------------------
def test_each_cap_is_a_row_error_naming_its_field_and_knob():
    rows = {"text": "ok", "constraint": NESTED, "references": MANY_REFERENCES}
    caps = limits.RowLimits()
    assert "max_json_depth" in limits.cell_problem(rows, ["constraint"], caps, ["constraint"])
    assert "'references' holds 1000000 items" in limits.cell_problem(rows, ["references"], caps)
    assert "'text'" in limits.cell_problem({"text": BIG_TEXT}, ["text"], caps)
    assert limits.cell_problem({"text": "é" * 300_000}, ["text"], caps) is None  # 600 KB
    assert "max_cell_bytes" in limits.cell_problem({"text": "é" * 600_000}, ["text"], caps)  # 1.2 MB in 600k chars
    assert "max_cell_bytes" in limits.cell_problem({"references": ["x" * 400_000] * 3}, ["references"], caps)
    # brackets inside JSON strings are text, not nesting
    assert limits.cell_problem({"c": json.dumps({"task": "keyword", "label": ["[" * 500]})}, ["c"], caps, ["c"]) is None
    assert limits.value_depth_exceeds({"a": [[[[1]]]]}, 4) and not limits.value_depth_exceeds({"a": [[[1]]]}, 4)
    with pytest.raises(ValueError, match="max_json_depth"):
        limits.RowLimits(max_json_depth=0)
    with pytest.raises(ValueError, match="unknown limit"):
        limits.RowLimits.from_mapping({"max_rows": 3})


def test_codi_nested_constraint_is_one_row_error_and_the_others_are_scored():
    metric = build_metric("codi", {})
    rows = [
        {"id": "a", "text": "one two three", "constraint": _length_constraint(1, 5)},
        {"id": "b", "text": "hello", "constraint": NESTED},
        {"id": "c", "text": "alpha beta", "constraint": json.dumps({"task": "keyword", "label": ["alpha"]})},
    ]
    results, seconds, peak = _measured(lambda: metric.score_rows(rows))
    assert [r["codi_success"] for r in results] == [1.0, None, 1.0]
    assert results[1]["error"] == "field 'constraint' nests deeper than 64 levels (max_json_depth)"
    assert seconds < 5 and peak < 50e6
    # with the cap lifted past the parser's recursion limit the row is still one row error
    metric.row_limits = limits.RowLimits(max_json_depth=10**6)
    assert "nests too deeply" in metric.score_rows(rows)[1]["error"]


def test_chrf_a_50_mb_cell_and_a_million_references_are_row_errors_in_bounded_time():
    metric = build_metric("chrf", {})
    rows = [
        {"id": "a", "text": "the cat sat on the mat", "references": ["the cat sat on a mat"]},
        {"id": "b", "text": "a text", "references": MANY_REFERENCES},
        {"id": "c", "text": BIG_TEXT, "references": ["word word"]},
        {"id": "d", "text": "the dog", "references": ["a dog"]},
    ]
    results, seconds, peak = _measured(lambda: metric.score_rows(rows))
    assert results[0]["chrf"] is not None and results[3]["chrf"] is not None
    assert results[0]["chrf"] == metric.score_rows([rows[0]])[0]["chrf"]
    assert "max_references" in results[1]["error"] and "'text'" in results[2]["error"]
    assert seconds < 5 and peak < 50e6  # the cells are never copied or parsed


class _Recording:
    """A tokenizer that records the longest text it was handed."""

    def __init__(self, tokenizer):
        self.tokenizer, self.longest = tokenizer, 0

    def __call__(self, texts, *args, **kwargs):
        self.longest = max([self.longest, *(len(t) for t in ([texts] if isinstance(texts, str) else texts))])
        return self.tokenizer(texts, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.tokenizer, name)


def test_a_50_mb_cell_never_reaches_the_tokeniser(tiny_models):
    metric = build_metric("perplexity", {"model": tiny_models["gpt2"]})
    metric.scorer.tokenizer = recording = _Recording(metric.scorer.tokenizer)
    metric.scorer.literal.tokenizer = recording  # texts are tokenised literally, through this one
    rows = [{"id": "a", "text": "the cat sat on the mat"}, {"id": "b", "text": BIG_TEXT}]
    results, seconds, peak = _measured(lambda: metric.score_rows(rows))
    assert results[0]["perplexity"] is not None and "max_cell_bytes" in results[1]["error"]
    assert recording.longest == len(rows[0]["text"])
    assert seconds < 10 and peak < 200e6


# ----- head-only tokenisation: the same ids, the same scores -----------------------------------
def _long_texts() -> list[str]:
    corpus = pq.read_table(REPO / "data" / "sample" / "summeval-00000.parquet", columns=["text"]).column("text").to_pylist()
    joined = " ".join(corpus)
    return [joined * 4, (joined + "\n\n") * 2, "x " * 60_000, "short text", "   spaced    out   " * 5000,
            "noseparatorsatall" * 5000]


@pytest.mark.parametrize("model", ["gpt2", "pegasus", "bart"])
def test_tokenising_heads_gives_the_ids_of_the_whole_text(tiny_models, model):
    from scoring.models import load_tokenizer, resolve_model
    from scoring.text_encoding import HEAD_CHARS_PER_TOKEN, encode_texts, tokenize_heads

    tokenizer = load_tokenizer(resolve_model(tiny_models[model]))
    texts = _long_texts()
    assert max(map(len, texts)) > 10 * (64 + 8) * HEAD_CHARS_PER_TOKEN  # heads are cut
    for max_length in (64, 512):
        full = tokenizer(texts, add_special_tokens=True)["input_ids"]
        heads, cut = tokenize_heads(lambda t: tokenizer(t, add_special_tokens=True)["input_ids"], texts, max_length)
        assert any(len(c) < len(t) for c, t in zip(cut, texts))
        for whole, head in zip(full, heads):
            assert head[:max_length] == whole[:max_length]
            assert (len(head) > max_length) == (len(whole) > max_length)
        for style in ("fast", "slow"):
            encoded = encode_texts(tokenizer, texts, max_length, style=style)
            import scoring.text_encoding as te

            saved = te.HEAD_CHARS_PER_TOKEN
            te.HEAD_CHARS_PER_TOKEN = 10**9  # the whole text
            try:
                whole = encode_texts(tokenizer, texts, max_length, style=style)
            finally:
                te.HEAD_CHARS_PER_TOKEN = saved
            assert encoded == whole


def test_perplexity_of_long_texts_is_unchanged_by_head_tokenisation(tiny_models, monkeypatch):
    import scoring.text_encoding as te

    metric = build_metric("perplexity", {"model": tiny_models["gpt2"], "max_length": 128})
    rows = [{"id": str(i), "text": text} for i, text in enumerate(_long_texts())]
    cut = metric.score_rows(rows)
    monkeypatch.setattr(te, "HEAD_CHARS_PER_TOKEN", 10**9)
    whole = metric.score_rows(rows)
    assert [r["perplexity"] for r in cut] == [r["perplexity"] for r in whole]
    assert [r["warning"] for r in cut] == [r["warning"] for r in whole]


def test_perplexity_of_a_long_cell_tokenises_only_its_head(tiny_models):
    from scoring.text_encoding import HEAD_CHARS_PER_TOKEN, HEAD_MARGIN

    metric = build_metric("perplexity", {"model": tiny_models["gpt2"], "max_length": 256})
    metric.scorer.tokenizer = recording = _Recording(metric.scorer.tokenizer)
    text = "the cat sat on the mat. " * 40_000  # 960 KB: under the cap
    result = metric.score_rows([{"id": "a", "text": text}])
    assert result[0]["perplexity"] is not None and "truncated" in result[0]["warning"]
    assert recording.longest <= (256 + HEAD_MARGIN) * HEAD_CHARS_PER_TOKEN < len(text) / 50  # tokenising the whole text holds hundreds of MB


# ----- inflating Parquet -----------------------------------------------------------------------
def _inflating(path: pathlib.Path) -> pathlib.Path:
    texts = ["a" * 900_000] * 24  # 21.6 MB declared, a few KB stored
    pq.write_table(pa.table({"id": [str(i) for i in range(24)], "text": texts}), path, compression="zstd",
                   use_dictionary=False)
    return path


def test_an_inflating_file_is_refused_with_both_sizes(tmp_path, cli):
    path = _inflating(tmp_path / "bomb.parquet")
    size = path.stat().st_size
    problem = limits.inflation_problem(pq.ParquetFile(path).metadata, size)
    assert problem is not None and str(size) in problem and "max_inflation=100" in problem
    proc = cli(["score", "-m", "text_stats", "-i", str(path), "-o", str(tmp_path / "out.parquet")])
    assert_user_error(proc, 1, str(path), f"in a file of {size} bytes", "uncompressed bytes")
    assert not (tmp_path / "out.parquet").exists()
    proc = cli(["score", "-m", "text_stats", "-i", str(path), "-o", str(tmp_path / "out.parquet"),
                "--input-limit", "max_inflation=100000"])
    assert proc.returncode == 0, proc.stderr


def test_a_shard_that_inflates_is_a_bad_shard(tmp_path):
    import fsspec

    from ray_jobs.storage import listing, shard_checks

    path = _inflating(tmp_path / "bomb.parquet")
    info = listing.ShardInfo(uri=str(path), rel="bomb.parquet", size=path.stat().st_size, etag="x")
    with pytest.raises(shard_checks.BadShard, match="uncompressed bytes in a file of"):
        shard_checks.check_shard(info, fsspec.filesystem("file"), ("text",))


def test_the_shipped_corpora_pass_the_inflation_check_comfortably():
    files = sorted((REPO / "data").rglob("*.parquet")) + sorted((REPO / "tests" / "data").rglob("*.parquet"))
    assert files
    for path in files:
        declared = limits.declared_size(pq.ParquetFile(path).metadata)
        assert declared < 10 * path.stat().st_size, path  # a tenth of the bound


# ----- paths -----------------------------------------------------------------------------------
@pytest.mark.parametrize("label", ["..", ".", "...", "a/b", "../x", "a\x00b", "a\\b", "..\n", "ok\n"])
def test_a_label_that_leaves_the_output_folder_is_a_config_error(tmp_path, label, cli):
    import yaml

    config = tmp_path / "job.yaml"
    config.write_text(yaml.safe_dump({"input": str(REPO / "data" / "sample"), "output": str(tmp_path / "out"),
                                      "metrics": [{"name": "text_stats", "label": label}]}))
    proc = cli(["run", "--config", str(config)])
    assert_user_error(proc, 2, "label")
    assert sorted(os.listdir(tmp_path)) == ["job.yaml"]


def test_score_output_equal_to_or_inside_its_input_is_a_usage_error(tmp_path, cli):
    source = REPO / "data" / "sample" / "summeval-00000.parquet"
    dump = tmp_path / "dump.parquet"
    dump.write_bytes(source.read_bytes())
    before = dump.read_bytes()
    assert_user_error(cli(["score", "-m", "text_stats", "-i", str(dump), "-o", str(dump)]), 2, "is the input")
    link = tmp_path / "link.parquet"
    link.symlink_to(dump)
    assert_user_error(cli(["score", "-m", "text_stats", "-i", str(dump), "-o", str(link)]), 2, "is the input")
    folder = tmp_path / "shards"
    folder.mkdir()
    (folder / "a.parquet").write_bytes(before)
    assert_user_error(cli(["score", "-m", "text_stats", "-i", str(folder), "-o", str(folder / "scores.parquet")]), 2,
                      "inside the input folder")
    assert_user_error(cli(["constraints", "score", "-i", str(dump), "-o", str(dump)]), 2, "is the input")
    assert dump.read_bytes() == before and sorted(os.listdir(folder)) == ["a.parquet"]


def test_score_codi_with_a_nested_constraint_exits_0_with_one_row_error(tmp_path, cli):
    rows = [{"id": "a", "text": "one two three", "constraint": _length_constraint(1, 5)},
            {"id": "b", "text": "x", "constraint": NESTED}]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "in.parquet")
    proc = cli(["score", "-m", "codi", "-i", str(tmp_path / "in.parquet"), "-o", str(tmp_path / "out.parquet"),
                "--max-error-rate", "1"])
    assert proc.returncode == 0, proc.stderr
    out = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert out[0]["codi_success"] == 1.0 and "max_json_depth" in out[1]["error"]
    proc = cli(["score", "-m", "codi", "-i", str(tmp_path / "in.parquet"), "-o", str(tmp_path / "out.parquet"),
                "--input-limit", "max_json_depth=0"])
    assert_user_error(proc, 2, "max_json_depth")


def test_the_manifest_config_records_no_secret(tmp_path):
    from ray_jobs.config import parse_config

    config = parse_config({"input": str(REPO / "data" / "sample"), "output": str(tmp_path / "out"),
                           "s3": {"endpoint_url": "https://minio:m1n10/s3cr3t@storage:9000"},
                           "metrics": [{"name": "perplexity", "params": {"model": "s3://AKIAEXAMPLE:abc/def@bucket/gpt2"}}]})
    text = json.dumps(config.as_dict())
    assert "s3cr3t" not in text and "abc/def" not in text and "AKIAEXAMPLE" not in text
    assert "https://***@storage:9000" in text and "s3://***@bucket/gpt2" in text


def test_the_job_limits_are_strict_and_reach_the_metric(tmp_path):
    from ray_jobs.config import ConfigError, parse_config
    from ray_jobs.job.metrics import resolve_metric

    base = {"input": str(REPO / "data" / "sample"), "output": str(tmp_path / "out"), "metrics": [{"name": "chrf"}]}
    config = parse_config({**base, "limits": {"max_references": 3, "max_inflation": 20}})
    assert config.limits.max_inflation == 20 and config.limits.max_cell_bytes == limits.MAX_CELL_BYTES
    metric = resolve_metric(config, config.metrics[0]).build(None)
    row = {"id": "a", "text": "x", "references": ["y"] * 4}
    assert "more than 3 (max_references)" in metric.score_rows([row])[0]["error"]
    assert parse_config(base).limits.row_limits() == limits.RowLimits()
    for bad, fragment in (({"max_rows": 1}, "unknown key"), ({"max_json_depth": 0}, "max_json_depth"),
                          ({"max_cell_bytes": "1MB"}, "max_cell_bytes"), ({"max_inflation": 0.5}, "max_inflation")):
        with pytest.raises(ConfigError, match=fragment):
            parse_config({**base, "limits": bad})


def test_redact_values_redacts_every_string_at_any_depth_and_keeps_the_rest():
    """The one redaction of printed JSON documents (`ctgscore --json`, the job's entrypoint)."""
    from scoring.redact import redact_values

    url = "s3://AKIAEXAMPLE:sec/ret@bucket/k?X-Amz-Signature=f00d&part=2"
    document = {"n": 3, "ok": True, "none": None, url: [url, ("plain", 1.5)], "nested": {"at": url}}
    redacted = redact_values(document)
    flat = repr(redacted)
    for secret in ("AKIAEXAMPLE", "sec/ret", "f00d"):
        assert secret not in flat
    assert redacted["n"] == 3 and redacted["ok"] is True and redacted["none"] is None
    (key,) = [k for k in redacted if k.startswith("s3://")]
    assert redacted[key][1] == ["plain", 1.5] and "bucket/k" in redacted["nested"]["at"]
    assert document["nested"]["at"] == url  # the input is not changed
