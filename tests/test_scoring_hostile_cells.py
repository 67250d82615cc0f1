"""Hostile cells through the scorers as a library (`RowMetric.score_rows`, `output_table`), through
`ctgscore score` and through `ctgscore convert`: each pathological value is one row error (or one
dropped row) naming its field, never a failed batch, an "internal error" or a silent score
(docs/security.md, "One pathological row is one row error"; docs/schema.md, "Input limits")."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scoring.registry import build_metric

GOOD_LENGTH = json.dumps({"task": "length", "mode": "around", "label": [3, 10]})
RESPONSE = "Sure:\n\nthe cat sat on the mat in the sun"  # 9 words after the clean-up


def _codi_rows(constraints):
    """One good length row first, then one row per hostile constraint."""
    good = {"id": "good", "text": RESPONSE, "constraint": GOOD_LENGTH}
    return [good] + [{"id": f"bad{i}", "text": RESPONSE, "constraint": c} for i, c in enumerate(constraints)]


@pytest.fixture(scope="module")
def topic_model(tmp_path_factory):
    from ctgscore.testing.tiny_classifier import build_tiny_classifier, one_hot_bias
    from scoring.codi import classifiers as clf

    topics = [clf.DEFAULT_TOPIC_MAP[label] for label in clf.TOPIC_LABELS]
    return str(build_tiny_classifier(tmp_path_factory.mktemp("topic"), topics, one_hot_bias(topics, "sports"), multi_label=True))


# ----- CoDI constraints ------------------------------------------------------------------------
# Each was a TypeError out of `validate` (an unhashable task or label): the whole batch failed,
# and `ctgscore score` said "internal error".
UNHASHABLE = [
    ('{"task": ["length"], "label": [0, 5]}', "'task' must be a string"),
    ('{"task": {"a": 1}, "label": [0, 5]}', "'task' must be a string"),
    ('{"task": "topic", "label": ["sports"]}', "'label' must be a string"),
    ('{"task": "topic", "label": {"x": 1}}', "'label' must be a string"),
    ('{"task": "multi", "label1": ["sports"], "label2": "joy"}', "'label1' must be a string"),
    ('{"task": "sentiment", "label": ["joy"]}', "'label' must be a string"),
]


@pytest.mark.parametrize(("constraint", "fragment"), UNHASHABLE)
def test_codi_unhashable_task_or_label_is_one_row_error(topic_model, constraint, fragment):
    metric = build_metric("codi", {"topic_model": topic_model})
    out = metric.score_rows(_codi_rows([constraint]))
    assert out[0]["error"] is None and out[0]["codi_success"] == 1.0
    assert fragment in out[1]["error"] and "constraint" in out[1]["error"]
    assert out[1]["codi_success"] is None


def test_codi_unhashable_task_through_score_is_a_row_error_not_an_internal_error(tmp_path, cli):
    table = pa.table({"id": ["good", "bad"], "text": [RESPONSE] * 2,
                      "constraint": [GOOD_LENGTH, '{"task": ["length"], "label": [0, 5]}']})
    pq.write_table(table, tmp_path / "in.parquet")
    proc = cli(["score", "-m", "codi", "-i", tmp_path / "in.parquet", "-o", tmp_path / "out.parquet",
                "--max-error-rate", "1", "--no-progress"])
    assert proc.returncode == 0, proc.stderr
    out = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert [row["id"] for row in out] == ["good", "bad"]
    assert out[0]["codi_success"] == 1.0 and "'task' must be a string" in out[1]["error"]


@pytest.mark.parametrize("constraint", [
    # the first `label` makes the row fail, the second (the one json.loads keeps) pass
    '{"task": "length", "mode": "at most", "label": [0, 1], "label": [0, 100]}',
    '{"task": "sentiment", "label": "joy", "task": "length", "label": [0, 100]}',
])
def test_codi_key_given_twice_is_a_row_error_not_the_last_value(constraint):
    out = build_metric("codi", {}).score_rows(_codi_rows([constraint]))
    assert out[1]["codi_success"] is None
    assert "field 'constraint'" in out[1]["error"] and "given twice" in out[1]["error"]


@pytest.mark.parametrize("label", ["[0, 1e309]", "[0, Infinity]", "[1e309, 1e309]", "[-Infinity, 5]", "[NaN, 5]"])
def test_codi_length_bound_must_be_finite(label):
    """A bound of 1e309 read as infinity made every response pass `at most` silently."""
    constraint = '{"task": "length", "mode": "at most", "label": %s}' % label
    out = build_metric("codi", {}).score_rows(_codi_rows([constraint]))
    assert out[1]["codi_success"] is None
    assert "length constraint 'label'" in out[1]["error"] and "finite" in out[1]["error"]


def test_codi_number_past_the_digit_limit_names_the_field():
    constraint = '{"task": "length", "mode": "at most", "label": [0, ' + "9" * 5000 + "]}"
    out = build_metric("codi", {}).score_rows(_codi_rows([constraint]))
    assert out[1]["error"].startswith("field 'constraint'") and "too long" in out[1]["error"]


@pytest.mark.parametrize(("constraint", "fragment"), [
    ('{"task": "keyword", "label": [1, 2]}', "keyword constraint 'label'"),
    ('{"task": "keyword", "label": ["cat", null]}', "keyword constraint 'label'"),
    ('{"task": "keyword", "label": [["cat"]]}', "keyword constraint 'label'"),
    ('{"task": "keyword", "label": ["  "]}', "keyword constraint 'label'"),
    ('{"task": "keyword", "label": ["cat"], "anti_label": 5}', "keyword constraint 'anti_label'"),
    ('{"task": "keyword", "label": ["cat"], "anti_label": ["dog"]}', "keyword constraint 'anti_label'"),
])
def test_codi_keyword_items_of_other_types_name_the_field(constraint, fragment):
    """These were bisected into `AttributeError: 'int' object has no attribute 'split'`."""
    out = build_metric("codi", {}).score_rows(_codi_rows([constraint]))
    assert out[0]["codi_success"] == 1.0
    assert fragment in out[1]["error"] and "Error" not in out[1]["error"]


def test_codi_label_of_another_type_is_not_read_as_a_class_index(topic_model):
    """`"label": 5` picked the model's output 5 and scored the row against it."""
    metric = build_metric("codi", {"topic_model": topic_model})
    out = metric.score_rows(_codi_rows(['{"task": "topic", "label": 5}', '{"task": "topic", "label": true}']))
    for result in out[1:]:
        assert result["codi_success"] is None and result["codi_score"] is None
        assert "'label' must be a string" in result["error"]


def test_codi_instruction_set_not_utf8_uses_the_shared_wording(tmp_path):
    from scoring.codi.convert import ConvertError, read_jsonl

    path = tmp_path / "length_lite.jsonl"
    path.write_bytes(b'{"instruction": "a", "mode": "around", "label": [8, 12]}\n{"instruction": "b\xff"}\n')
    with pytest.raises(ConvertError) as caught:
        read_jsonl(path)
    assert str(caught.value) == f"{path}: not UTF-8 text (line 2, byte 75)"


# ----- rows given to the library as Python values -------------------------------------------
# A dict row is not typed by Arrow: an int text was `AttributeError: 'int' object has no
# attribute 'split'`, bytes were scored as their repr, a string or a dict of references was
# scored as its characters or keys, and a lone surrogate (from a JSON `\ud800` escape) was
# `TypeError: TextEncodeInput must be ...` in every model metric.
TEXTS = [(5, "must be a string, got int"), (b"the cat", "must be a string, got bytes"),
         (["the cat"], "must be a string, got list"), ({"a": 1}, "must be a string, got dict"),
         (1.5, "must be a string, got float"), ("the \ud800 cat", "not valid UTF-8 (a lone surrogate")]
REFERENCES = [("the cat sat", "must be a list of strings, got str"), ({"a": "b"}, "must be a list of strings, got dict"),
              (["the cat", 3], "item 1 must be a string, got int"), ([["the cat"]], "item 0 must be a string, got list"),
              (["the \udfff cat"], "not valid UTF-8 (a lone surrogate")]


def _row(**values):
    row = {"id": "x", "text": "the cat sat on the mat", "source": "The cat sat on the mat. It was sunny.",
           "references": ["a cat sat on a mat"]}
    row.update(values)
    return row


@pytest.mark.parametrize("name", ["text_stats", "bleu", "chrf", "rouge"])
@pytest.mark.parametrize(("text", "fragment"), TEXTS)
def test_library_text_of_another_type_is_a_row_error_naming_the_field(name, text, fragment):
    out = build_metric(name, {}).score_rows([_row(id="good"), _row(text=text)])
    assert out[0]["error"] is None
    assert out[1]["error"].startswith("field 'text' ") and fragment in out[1]["error"]
    assert all(out[1][column] is None for column in build_metric(name, {}).output_columns)


@pytest.mark.parametrize("name", ["bleu", "chrf", "rouge"])
@pytest.mark.parametrize(("references", "fragment"), REFERENCES)
def test_library_references_of_another_type_are_a_row_error(name, references, fragment):
    out = build_metric(name, {}).score_rows([_row(id="good"), _row(references=references)])
    assert out[0]["error"] is None
    assert out[1]["error"].startswith("field 'references' ") and fragment in out[1]["error"]


@pytest.mark.parametrize(("column", "value", "fragment"), [
    ("text", "the \ud800 cat", "field 'text' is not valid UTF-8"),
    ("source", "a \udfff source", "field 'source' is not valid UTF-8"),
    ("references", {"a cat": "sat"}, "field 'references' must be a list of strings, got dict"),
    ("source", 7, "field 'source' must be a string, got int"),
])
def test_library_model_metric_names_the_field(tiny_models, column, value, fragment):
    metric = build_metric("bartscore", {"model": tiny_models["bart"]})
    out = metric.score_rows([_row(id="good"), _row(**{column: value})])
    assert out[0]["error"] is None and out[0]["bartscore_s_h"] is not None
    assert out[1]["error"].startswith(fragment), out[1]["error"]


def test_library_attributes_of_another_type_are_a_row_error(tmp_path):
    """A string `attributes` was unpacked pair by pair while deciding whether the row is
    skipped: a ValueError out of `score_rows`, the whole batch lost."""
    from ctgscore.testing.tiny_classifier import build_tiny_classifier

    model = str(build_tiny_classifier(tmp_path / "sent", ["neg", "pos"], bias=[0.0, 5.0]))
    metric = build_metric("attribute_accuracy", {"classifiers": {"sentiment": model}})
    rows = [_row(id="good", attributes={"sentiment": "pos"}), _row(attributes="sentiment"),
            _row(attributes=[("sentiment", 5)]), _row(attributes=7)]
    out = metric.score_rows(rows)
    assert out[0]["attribute_accuracy"] == 1.0
    assert [r["error"] for r in out[1:]] == ["field 'attributes' must be a map of strings (aspect -> value), got str",
                                             "field 'attributes' value of 'sentiment' must be a string, got int",
                                             "field 'attributes' must be a map of strings (aspect -> value), got int"]


def test_library_output_table_with_a_lone_surrogate_in_a_carried_column():
    """`output_table` wrote the carried `system` as it was: a lone surrogate failed the whole
    table (UnicodeEncodeError in Arrow). The row is an error naming the field, its value null."""
    metric = build_metric("text_stats", {})
    rows = [_row(id="good", system="A"), _row(id="bad", system="B\ud800")]
    table = metric.output_table(rows)
    out = table.to_pylist()
    assert out[0]["error"] is None and out[0]["system"] == "A"
    assert out[1]["error"] == "field 'system' is not valid UTF-8 (a lone surrogate \\ud800 at character 1)"
    assert out[1]["system"] is None and out[1]["text_stats_words"] is None


def test_library_output_table_with_a_lone_surrogate_in_a_read_column():
    """The row key hashes the columns the metric reads: a lone surrogate in `text` was a
    UnicodeEncodeError there, after scoring, for the whole table."""
    metric = build_metric("text_stats", {})
    out = metric.output_table([_row(id="good"), _row(id="bad", text="x \ud800")]).to_pylist()
    assert out[0]["error"] is None and out[1]["error"].startswith("field 'text' is not valid UTF-8")
    assert out[0]["row_key"] != out[1]["row_key"] and len(out[1]["row_key"]) == 24


# ----- convert ----------------------------------------------------------------------------------
def test_convert_jsonl_lone_surrogate_escape_drops_the_row(tmp_path, cli):
    """`"\\ud800"` is valid JSON and reads as a lone surrogate, which no Parquet string can hold:
    the conversion ended in "internal error: UnicodeEncodeError"."""
    src = tmp_path / "dump.jsonl"
    src.write_text('{"id": "1", "text": "a \\ud800 b"}\n{"id": "2", "text": "fine"}\n'
                   '{"id": "3", "text": "x", "references": ["r", "\\udfff"]}\n'
                   '{"id": "4", "text": "x", "attributes": {"\\ud800": "v"}}\n', encoding="utf-8")
    proc = cli(["convert", "-i", src, "-o", tmp_path / "out.parquet", "--report", tmp_path / "report.json"])
    assert proc.returncode == 0, proc.stderr
    assert pq.read_table(tmp_path / "out.parquet").column("id").to_pylist() == ["2"]
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    reasons = " | ".join(report["dropped"]) if isinstance(report["dropped"], dict) else json.dumps(report["dropped"])
    for column in ("text", "references", "attributes"):
        assert f"{column}: not valid UTF-8 (a lone surrogate" in reasons, reasons


def test_convert_jsonl_field_name_with_a_lone_surrogate(tmp_path, cli):
    """A field name holding one is listed, escaped, among the fields left out (a `human_` one
    too: no Parquet column can be named so); both were "internal error: UnicodeEncodeError"."""
    src = tmp_path / "dump.jsonl"
    src.write_text('{"id": "1", "text": "a", "\\ud800x": 1, "human_\\udfff": 2}\n', encoding="utf-8")
    proc = cli(["convert", "-i", src, "-o", tmp_path / "out.parquet", "--report", tmp_path / "report.json"])
    assert proc.returncode == 0, proc.stderr
    report = json.loads((tmp_path / "report.json").read_text(encoding="utf-8"))
    assert report["ignored_fields"] == ["\\ud800x", "human_\\udfff"]
    assert pq.read_table(tmp_path / "out.parquet").column_names == ["id", "text"]


# ----- scores that are 0/0 --------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_roberta(tmp_path_factory):
    from ctgscore.testing.tiny_models import build_roberta

    return str(build_roberta(tmp_path_factory.mktemp("tiny-roberta") / "roberta", seed=4))


@pytest.mark.parametrize(("text", "references"), [("</s>", ["the cat sat"]), ("<s></s>", ["the cat sat"]),
                                                  ("the cat sat", ["</s>"]), ("the cat sat", ["a cat", "<s>"])])
def test_bertscore_text_of_special_tokens_only_is_a_row_error_not_nan(tiny_roberta, text, references):
    """Only special tokens, which weigh 0, made P or R 0/0: NaN scores (and F 0, as the bert-score
    package writes them) in an error-free row, and a NaN mean in `ctgscore score`'s summary."""
    import math

    metric = build_metric("bertscore", {"model": tiny_roberta, "layer": 2})
    out = metric.score_rows([{"id": "good", "text": "the cat sat", "references": ["a cat sat"]},
                             {"id": "bad", "text": text, "references": references}])
    assert all(math.isfinite(out[0][c]) for c in metric.output_columns)
    assert all(out[1][c] is None for c in metric.output_columns), out[1]
    assert "weighs 0" in out[1]["error"]


# ----- columns of Arrow type null ---------------------------------------------------------------
def _null_typed_dump(folder):
    """Two shards: in the first, `references`, `system` and `human_x` are all None as pandas
    writes them (Arrow type null); in the second they hold values."""
    folder.mkdir()
    pq.write_table(pa.table({"id": ["a", "b"], "text": ["the cat sat", "a dog"], "references": pa.nulls(2),
                             "system": pa.nulls(2), "human_x": pa.nulls(2)}), folder / "part-0.parquet")
    pq.write_table(pa.table({"id": ["c", "d"], "text": ["the cat sat", "a dog"], "references": [["a cat sat"], ["a dog"]],
                             "system": ["A", "B"], "human_x": [1.0, 2.0]}), folder / "part-1.parquet")


def test_score_a_column_of_type_null_is_a_column_of_nulls(tmp_path, cli):
    """Such a column refused its shard ("column 'references' is null, expected list<string>"),
    and a folder holding it beside a typed shard was "cannot read it as Parquet (Unsupported
    cast from list<element: string> to null)" for every shard."""
    _null_typed_dump(tmp_path / "dump")
    for source in (tmp_path / "dump", tmp_path / "dump" / "part-0.parquet"):
        proc = cli(["score", "-m", "text_stats", "-i", source, "-o", tmp_path / "out.parquet", "--no-progress"])
        assert proc.returncode == 0, proc.stderr
    proc = cli(["score", "-m", "chrf", "-i", tmp_path / "dump", "-o", tmp_path / "out.parquet", "--no-progress"])
    assert proc.returncode == 0, proc.stderr
    out = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert [(row["id"], row["system"], row["human_x"], row["skipped"]) for row in out] == [
        ("a", None, None, "no references"), ("b", None, None, "no references"), ("c", "A", 1.0, None), ("d", "B", 2.0, None)]
    assert out[2]["chrf"] == build_metric("chrf", {}).score_rows([{"text": "the cat sat", "references": ["a cat sat"]}])[0]["chrf"]


@pytest.mark.timeout(300)
def test_job_a_column_of_type_null_is_a_column_of_nulls(ray_local, ray_address, tmp_path):
    """The job's shard check refused such a shard as a bad shard, by the same rule."""
    from ray_jobs.config import parse_config
    from ray_jobs.score_corpus import run_job

    _null_typed_dump(tmp_path / "dump")
    config = parse_config({"input": str(tmp_path / "dump"), "output": str(tmp_path / "out"), "metrics": [{"name": "chrf"}],
                           "batch_size": 4, "pool": {"min_size": 1, "max_size": 1, "num_cpus": 0.5},
                           "progress": False, "ray": {"address": ray_address}})
    manifest = run_job(config)
    assert not manifest.get("bad_shards"), manifest["bad_shards"]
    out = {row["id"]: row for row in pq.read_table(tmp_path / "out" / "chrf").to_pylist()}
    assert {key: (row["system"], row["human_x"], row["skipped"]) for key, row in out.items()} == {
        "a": (None, None, "no references"), "b": (None, None, "no references"), "c": ("A", 1.0, None), "d": ("B", 2.0, None)}


# ----- only the head of a text is tokenised -----------------------------------------------------
class _Longest:
    """Wraps a tokenizer call and records the longest text it was handed."""

    def __init__(self, call):
        self.call, self.longest = call, 0

    def __call__(self, texts, *args, **kwargs):
        self.longest = max([self.longest, *(len(t) for t in texts if isinstance(t, str))])
        return self.call(texts, *args, **kwargs)


@pytest.mark.parametrize("column", ["text", "source"])
def test_gptscore_tokenises_only_the_head_of_a_text_past_max_length(tiny_models, monkeypatch, column):
    """gptscore tokenised the whole of a 1 MB cell (seconds of CPU per row) only to find it longer
    than `max_length`; the row is the same error, from the text's head."""
    metric = build_metric("gptscore", {"model": tiny_models["gpt2"]})
    literal = metric.scorer.literal
    recorder = _Longest(literal.tokenizer)
    monkeypatch.setattr(literal, "tokenizer", recorder)
    long_value = "the cat sat on the mat . " * 40_000  # 1,000,000 characters
    out = metric.score_rows([_row(id="good"), _row(**{column: long_value})])
    assert out[0]["error"] is None
    assert "is longer than max_length 1024" in out[1]["error"]
    assert recorder.longest < 100_000, recorder.longest


def test_attributes_naming_an_aspect_twice_is_a_row_error(tmp_path, cli):
    """An Arrow map may hold a key twice; the row was scored against the last value silently."""
    from ctgscore.testing.tiny_classifier import build_tiny_classifier

    model = str(build_tiny_classifier(tmp_path / "sent", ["neg", "pos"], bias=[0.0, 5.0]))
    attributes = pa.array([[("sentiment", "pos")], [("sentiment", "neg"), ("sentiment", "pos")]],
                          pa.map_(pa.string(), pa.string()))
    pq.write_table(pa.table({"id": ["good", "twice"], "text": ["a text", "a text"], "attributes": attributes}),
                   tmp_path / "in.parquet")
    proc = cli(["score", "-m", "attribute_accuracy", "-i", tmp_path / "in.parquet", "-o", tmp_path / "out.parquet",
                "--params", json.dumps({"classifiers": {"sentiment": model}}), "--max-error-rate", "1", "--no-progress"])
    assert proc.returncode == 0, proc.stderr
    out = pq.read_table(tmp_path / "out.parquet").to_pylist()
    assert out[0]["attribute_accuracy"] == 1.0
    assert out[1]["attribute_accuracy"] is None and out[1]["error"] == "field 'attributes' names the key 'sentiment' twice"


def test_convert_csv_holds_no_four_byte_copy_of_the_file(tmp_path):
    """The CSV reader read the text through `io.StringIO`, which copies it at 4 bytes a
    character: a 10 MB cell peaked at 13.7 times its size in Python objects (9.7 now; the csv
    module's own field buffer takes 4 bytes a character too). The convert reads the whole file,
    so its memory follows the file's size; this keeps the factor down."""
    import tracemalloc

    from ctgscore.convert import convert_file

    size = 10_000_000
    src = tmp_path / "big.csv"
    src.write_text("id,text\n1," + "a" * size + "\n2,ok\n", encoding="utf-8")
    tracemalloc.start()
    try:
        table, report = convert_file(str(src))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert table.column("id").to_pylist() == ["1", "2"] and len(table.column("text")[0].as_py()) == size
    assert peak < 12 * size, peak / size


def test_codi_keeps_no_long_word_in_its_lemma_cache():
    """Every response word's lemmas were cached, up to 200,000 words of any length: a dump of
    rows each holding one unique 1 MB word kept 1 MB per row for the life of the process."""
    from scoring.codi import rules

    rules.lemma_set.cache_clear()
    constraint = json.dumps({"task": "keyword", "label": ["cat"]})
    rows = [{"id": str(i), "text": "Sure:\n\nthe cat " + "ab" * 50_000 + str(i), "constraint": constraint} for i in range(5)]
    out = build_metric("codi", {}).score_rows(rows)
    assert [row["codi_success"] for row in out] == [1.0] * 5
    assert rules.lemma_set.cache_info().currsize == 2  # "the" and "cat"


# ----- CTRLEval coherence masks every sentence ---------------------------------------------------
@pytest.mark.timeout(120)
@pytest.mark.parametrize(("text", "fragment"), [
    ("The cat sat. " * 20_000, "20000 sentences, more than 512"),  # 260 kB: was about 10 min of CPU on the tiny model
    ("The cat sat on the mat. " * 200 + "x" * 900_000, "masked copies would hold"),  # 200 copies of 905 kB
])
def test_ctrleval_coherence_refuses_a_text_of_too_many_sentences(tiny_models, text, fragment):
    """Coherence builds one masked copy of the text per sentence and runs one model pass per
    copy: a cell of many sentences cost minutes to hours and gigabytes for one row."""
    import time

    metric = build_metric("ctrleval", {"model": tiny_models["pegasus"], "iwf": tiny_models["iwf"], "aspects": ["coherence"]})
    start = time.process_time()
    out = metric.score_rows([{"id": "good", "text": "The cat sat on the mat. It was warm."}, {"id": "bad", "text": text}])
    assert time.process_time() - start < 30
    assert out[0]["error"] is None and out[0]["ctrleval_coherence"] is not None
    assert out[1]["ctrleval_coherence"] is None and fragment in out[1]["error"], out[1]["error"]


def test_rouge_l_refuses_a_longest_common_subsequence_table_past_its_bound():
    """rouge-score's ROUGE-L fills a (text words x reference words) table of Python lists: two
    1 MB cells of short words made one of 10^10 cells, hours and hundreds of GB for one row."""
    text = " ".join(f"w{i % 500}" for i in range(4000))
    reference = " ".join(f"w{(i * 7) % 500}" for i in range(4000))
    rows = [_row(id="good"), _row(text=text, references=[reference])]
    out = build_metric("rouge", {}).score_rows(rows)
    assert out[0]["error"] is None and out[0]["rougeL_f"] is not None
    assert out[1]["rougeL_f"] is None
    assert out[1]["error"] == ("rougeL: text (4000 words) x references (4000 words) is 16000000 cells of the longest "
                               "common subsequence table, more than 10000000")
    assert build_metric("rouge", {"types": ["rouge1", "rouge2"]}).score_rows(rows)[1]["error"] is None  # no table
