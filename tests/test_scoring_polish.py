"""Library edges: wrong argument types, empty input, devices, parameter ranges, shipped
resources by name from any directory, and inputs the split and constraint code refuse."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest

from scoring.errors import InputError, UsageError


@pytest.fixture(scope="module")
def bart(tiny_models):
    from scoring.bartscore import BARTScorer

    return BARTScorer(tiny_models["bart"])


@pytest.fixture(scope="module")
def ppl(tiny_models):
    from scoring.perplexity import Perplexity

    return Perplexity(tiny_models["gpt2"])


@pytest.fixture(scope="module")
def ctrl(tiny_models):
    from scoring.ctrleval import CTRLEval

    return CTRLEval(tiny_models["pegasus"], iwf=tiny_models["iwf"], prompts="prompt_senti", verbalizers="verbal_senti")


def test_a_string_where_a_list_belongs_is_a_type_error(bart, ppl, ctrl):
    with pytest.raises(TypeError, match="srcs must be a list of strings"):
        bart.score("abc", "abd")
    with pytest.raises(TypeError, match="tgts must be a list of strings"):
        bart.score(["abc"], "a")
    with pytest.raises(TypeError, match=r"tgts\[0\] must be a list of strings"):
        bart.multi_ref_score(["abc"], ["ref"])
    with pytest.raises(TypeError, match=r"srcs\[1\] must be a string"):
        bart.score(["a", 3], ["b", "c"])
    with pytest.raises(TypeError, match="texts must be a list of strings"):
        ppl.score("some text")
    with pytest.raises(TypeError, match="data must be a list of strings"):
        ctrl.score("coh", "One sentence. Two sentences.")


def test_prompt_set_names_work_in_score_prompted(bart):
    named = bart.score_prompted(["A source text."], ["A target."], "tiny_ref_hypo", side="decoder")
    explicit = bart.score_prompted(["A source text."], ["A target."], ["Such as"], side="decoder")
    assert named == pytest.approx(explicit, abs=1e-6)
    by_file_name = bart.score_prompted(["A source text."], ["A target."], "tiny_ref_hypo_prompt.txt", side="decoder")
    assert by_file_name == pytest.approx(explicit, abs=1e-6)


def test_empty_input_returns_an_empty_list(bart, ppl, ctrl):
    assert bart.score([], []) == []
    assert bart.multi_ref_score([], []) == []
    assert bart.score_prompted([], [], ["Such as"]) == []
    assert ppl.score([]) == []
    for aspect, extra in (("coh", {}), ("cons", {"prefix": []}), ("rel", {"label": []})):
        assert ctrl.score(aspect, [], **extra) == []


@pytest.mark.parametrize("device,message", [("gpu", "unknown device 'gpu'"), ("cuda", "CUDA is not available"),
                                            ("cuda:x", "unknown device"), (0, "device must be a string")])
def test_devices_are_validated_in_one_line(tiny_models, device, message):
    import torch

    from scoring.perplexity import Perplexity

    if str(device).startswith("cuda") and device != "cuda:x" and torch.cuda.is_available():
        pytest.skip("CUDA is present here")
    with pytest.raises(UsageError, match=message) as info:
        Perplexity(tiny_models["gpt2"], device=device)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("metric,params,name", [
    ("bartscore", {"token_budget": -5}, "token_budget"),
    ("bartscore", {"token_budget": 2.5}, "token_budget"),
    ("bartscore", {"dtype": "float64"}, "dtype"),
    ("bartscore", {"max_length": 0}, "max_length"),
    ("bartscore", {"agg": "median"}, "agg"),
    ("bartscore", {"f_reference": "both"}, "f_reference"),
    ("bartscore", {"prompt_side": "middle"}, "prompt_side"),
    ("bartscore", {"directions": ["s_r"]}, "directions"),
    ("perplexity", {"token_budget": 0}, "token_budget"),
    ("perplexity", {"min_words": -1}, "min_words"),
    ("perplexity", {"dtype": "int8"}, "dtype"),
    ("ctrleval", {"sentence_splitter": "spacy", "aspects": ["coh"]}, "sentence_splitter"),
    ("ctrleval", {"tokenization": "medium", "aspects": ["coh"]}, "tokenization"),
    ("ctrleval", {"token_budget": -1, "aspects": ["coh"]}, "token_budget"),
    ("ctrleval", {"aspects": ["style"]}, "aspects"),
    ("codi", {"batch_size": -4}, "batch_size"),
    ("codi", {"topic_threshold": 1.5}, "topic_threshold"),
    ("codi", {"dtype": "half"}, "dtype"),
    ("codi", {"toxicity_activation": "relu"}, "toxicity_activation"),
])
def test_metric_params_are_validated_at_construction(tiny_models, metric, params, name):
    from scoring.bartscore import BARTScoreMetric
    from scoring.codi.metric import CodiMetric
    from scoring.ctrleval import CTRLEvalMetric
    from scoring.perplexity import PerplexityMetric

    model = {"bartscore": {"model": tiny_models["bart"]}, "perplexity": {"model": tiny_models["gpt2"]},
             "ctrleval": {"model": tiny_models["pegasus"], "iwf": tiny_models["iwf"]}, "codi": {}}[metric]
    cls = {"bartscore": BARTScoreMetric, "perplexity": PerplexityMetric, "ctrleval": CTRLEvalMetric, "codi": CodiMetric}[metric]
    with pytest.raises(UsageError, match=name):
        cls(**model, **params)


def test_shipped_resources_resolve_from_any_directory(tmp_path, repo_root):
    script = (
        "from scoring.resources import bartscore_prompt_path, resource_path, ctrleval_task_paths\n"
        "import json\n"
        "print(json.dumps([str(bartscore_prompt_path('src_hypo')),"
        " str(resource_path('scoring/resources/ctrleval/prompt_senti.txt')),"
        " str(resource_path('verbal_topic.txt')), str(resource_path('prompt_topic')),"
        " [str(p) for p in ctrleval_task_paths('senti')]]))\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    paths = json.loads(out.stdout)
    resources = repo_root / "scoring" / "resources"
    assert paths[:4] == [str(resources / "bartscore" / "src_hypo_prompt.txt"), str(resources / "ctrleval" / "prompt_senti.txt"),
                         str(resources / "ctrleval" / "verbal_topic.txt"), str(resources / "ctrleval" / "prompt_topic.txt")]
    assert paths[4] == [str(resources / "ctrleval" / "prompt_senti.txt"), str(resources / "ctrleval" / "verbal_senti.txt")]


def test_own_files_still_win(tmp_path):
    from scoring.resources import bartscore_prompt_path

    mine = tmp_path / "src_hypo_prompt.txt"
    mine.write_text("My prompt\n")
    assert bartscore_prompt_path(mine) == mine


@pytest.mark.parametrize("label,reason", [([20, 3], "inverted: lower bound 20 > upper bound 3"), ([-1, 5], "negative"),
                                          (["a", 5], "two numbers"), ([5], r"must be \[lo, hi\]")])
def test_codi_refuses_bad_length_labels_per_row(label, reason):
    from scoring.codi.metric import CodiMetric

    rows = [{"id": "a", "text": "one two three", "constraint": json.dumps({"task": "length", "label": label})},
            {"id": "b", "text": "one two three", "constraint": json.dumps({"task": "length", "label": [1, 5]})}]
    results = CodiMetric().score_rows(rows)
    assert results[0]["codi_success"] is None and results[0]["error"] is not None
    assert re.search(reason, results[0]["error"])
    assert results[1]["error"] is None and results[1]["codi_success"] == 1.0


def test_splits_refuse_a_one_value_aspect():
    from splits.aspects import from_aspects

    with pytest.raises(InputError, match="aspect 'tense' has a single value"):
        from_aspects({"sentiment": ["Pos", "Neg"], "tense": ["Past"]})
    with pytest.raises(InputError, match="at least 2 aspects"):
        from_aspects({"sentiment": ["Pos", "Neg"]})


def test_splits_usage_errors():
    from splits.aspects import parse_aspects_arg
    from splits.protocols import build_splits

    universe = parse_aspects_arg("Yelp")
    for kwargs, name in (({"protocol": "acd", "restarts": 0}, "restarts"), ({"protocol": "hard"}, "protocol"),
                         ({"protocol": "acd", "duplicates": "all"}, "duplicates"), ({"protocol": "acd", "alpha": 1.5}, "alpha")):
        with pytest.raises(UsageError, match=name):
            build_splits(universe, **kwargs)


def test_missing_or_bad_parameter_files_name_the_param(tiny_models, tmp_path):
    from scoring.bartscore import BARTScoreMetric
    from scoring.ctrleval import CTRLEval

    with pytest.raises(UsageError, match="iwf: .*nope.txt"):
        CTRLEval(tiny_models["pegasus"], iwf=str(tmp_path / "nope.txt"))
    bad = tmp_path / "bad_iwf.txt"
    bad.write_text("0.5\nnot-a-number\n")
    with pytest.raises(UsageError, match="iwf: .*bad_iwf.txt:2"):
        CTRLEval(tiny_models["pegasus"], iwf=str(bad))
    with pytest.raises(UsageError, match="prompts: .*missing_prompts.txt"):
        CTRLEval(tiny_models["pegasus"], iwf=tiny_models["iwf"], prompts=str(tmp_path / "missing_prompts.txt"), verbalizers="verbal_senti")
    garbage = tmp_path / "weights.safetensors"
    garbage.write_text("garbage")
    for state_dict in (str(garbage), str(tmp_path / "absent.safetensors"), str(tmp_path / "weights.bin")):
        with pytest.raises(UsageError, match="state_dict: "):
            BARTScoreMetric(model=tiny_models["bart"], state_dict=state_dict)
    with pytest.raises(UsageError, match="prompts: "):
        BARTScoreMetric(model=tiny_models["bart"], prompts="no_such_prompt_set")
