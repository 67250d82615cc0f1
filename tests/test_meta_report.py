"""The meta-eval job renders reports (JSON, Markdown/HTML, real PNGs) from a checklist CSV and from
a scoring-job-like output (issue 4, acceptance 3)."""

from __future__ import annotations

import argparse
import json

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from meta_eval import report
from ray_jobs import meta_eval as job

PNGS = ["correlations.png", "significance.png", "checklist_ks.png", "preference_similarity.png",
        "win_fractions.png"]
EXPECTED_SHAPE = (int(report.FIGSIZE[1] * report.DPI), int(report.FIGSIZE[0] * report.DPI))


def _check_pngs(out):
    for name in PNGS:
        path = out / name
        assert path.exists(), path
        assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        image = mpimg.imread(path)
        assert image.shape[:2] == EXPECTED_SHAPE, name
        assert image.shape[2] in (3, 4)
        assert float(np.std(image[..., :3])) > 0.01, f"{name} is blank"


def _scores_like_output(shared_data, tmp_path):
    """A small frame in the scoring job's output schema, built from SummEval's stored columns."""
    src = pd.read_parquet(shared_data / "corpora" / "summeval.parquet")
    src = src[src["system"].isin(["M0", "M1", "M2", "M5", "M8", "M9", "M11", "M23"])].reset_index(drop=True)
    rng = np.random.default_rng(0)
    out = pd.DataFrame({"id": src["id"]})
    out["bartscore_s_h"] = src["human_coherence"] + rng.normal(0, 0.8, len(src))
    out["perplexity"] = 50 - 5 * src["human_fluency"] + rng.normal(0, 3, len(src))
    out["text_stats_words"] = src["text"].str.split().str.len().astype(float)
    out["error"] = None
    bad = rng.choice(len(src), 7, replace=False)
    out.loc[bad, "error"] = "ValueError: empty text"
    out.loc[bad, ["bartscore_s_h", "perplexity", "text_stats_words"]] = np.nan
    out["signature"] = "metric:bartscore|v:1|model:tiny"
    for col in ["dataset", "system", "doc_id", "human_coherence", "human_consistency", "human_fluency",
                "human_relevance"]:
        out[col] = src[col]
    folder = tmp_path / "scores"
    folder.mkdir()
    out.iloc[:400].to_parquet(folder / "part-00000.parquet", index=False)
    out.iloc[400:].to_parquet(folder / "part-00001.parquet", index=False)
    return folder, out, set(bad)


def test_report_from_checklist_csv(shared_data, tmp_path):
    out = tmp_path / "usr"
    code = job.main(["--scores", str(shared_data / "checklist" / "usr_persona_chat.csv"),
                     "--metrics", "perplexity", "bleu", "rouge1", "cohere_met", "bert_f1_src",
                     "--out", str(out), "--resamples", "30", "--tasks", "0", "--format", "both",
                     "--methods", "spearman", "kendall"])
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    [group] = results["groups"]
    assert group["name"] == "usr_persona_chat"
    chk = group["checklist"]
    assert chk["system_ks"]["easy"]["human_Understandable"] == pytest.approx(0.058333, abs=1e-6)
    assert chk["preference_similarity"]["easy"]["perplexity"]["human_Overall"] == pytest.approx(5 / 9)
    assert results["signature_fields"]["bootstrap"]["seed"] == 0 and "\"resamples\":30" in results["signature"]
    assert len(group["significance"]) == 6  # one block per human aspect
    text = (out / "report.md").read_text()
    assert "Metric preference checklist" in text and "0.0583" in text
    assert "<table>" in (out / "report.html").read_text()
    assert "usr_persona_chat/win_fractions.png" in text
    _check_pngs(out / "usr_persona_chat")


@pytest.mark.timeout(240)
def test_report_from_scoring_job_output_with_ray(ray_local, shared_data, tmp_path):
    folder, frame, bad = _scores_like_output(shared_data, tmp_path)
    out = tmp_path / "report"
    code = job.main(["--scores", str(folder), "--out", str(out), "--resamples", "50", "--tasks", "2",
                     "--level", "sample", "document", "system", "--seed", "7"])
    assert code == 0
    results = json.loads((out / "results.json").read_text())
    assert results["input"]["rows_in"] == len(frame)
    assert results["input"]["rows_error"] == len(bad)
    assert results["input"]["metrics"] == ["bartscore_s_h", "perplexity", "text_stats_words"]
    [group] = results["groups"]
    assert group["name"] == "summeval" and group["rows"] == len(frame)
    ok = frame.drop(index=sorted(bad))
    rows = {(r["metric"], r["human"], r["level"], r["method"]): r["value"] for r in group["correlations"]}
    expected = stats.spearmanr(ok["bartscore_s_h"], ok["human_coherence"]).statistic
    assert rows[("bartscore_s_h", "human_coherence", "sample", "spearman")] == pytest.approx(expected)
    means = ok.groupby("system")[["perplexity", "human_fluency"]].mean()
    expected = stats.kendalltau(means["perplexity"], means["human_fluency"]).statistic
    assert rows[("perplexity", "human_fluency", "system", "kendall")] == pytest.approx(expected)
    levels = {(s["human"], s["level"]) for s in group["significance"]}
    assert len(levels) == 12  # 4 aspects x 3 bootstrap levels
    assert all(s["n_rows"] == len(ok) for s in group["significance"])
    block = group["significance"][0]
    assert set(block["comparisons"]) == {"bartscore_s_h > perplexity", "bartscore_s_h > text_stats_words",
                                         "perplexity > text_stats_words"}
    assert "seed:7" in block["signature"]
    assert block["negated"] == ["perplexity"]
    assert group["checklist"]["pairs_from"] == "human ranking"
    _check_pngs(out / "summeval")


def test_meta_subcommand_registers():
    from meta_eval import cli

    parser = argparse.ArgumentParser()
    cli.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["meta", "--scores", "x.parquet", "--out", "o", "--tasks", "4", "--level", "document"])
    assert args.handler is cli.handler and args.tasks == 4 and args.level == ["document"]


def test_missing_scores_path_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothing-here"):
        job.main(["--scores", str(tmp_path / "nothing-here"), "--out", str(tmp_path / "o"), "--tasks", "0"])


def test_unknown_metric_column_is_a_clear_error(shared_data, tmp_path):
    folder, _, _ = _scores_like_output(shared_data, tmp_path)
    with pytest.raises(KeyError, match="bleurt"):
        job.main(["--scores", str(folder), "--metrics", "bleurt", "--out", str(tmp_path / "o"), "--tasks", "0"])


def test_given_pairs_from_the_command_line(shared_data, tmp_path):
    folder, frame, bad = _scores_like_output(shared_data, tmp_path)
    out = tmp_path / "pairs"
    assert job.main(["--scores", str(folder), "--out", str(out), "--resamples", "0", "--tasks", "0",
                     "--methods", "spearman", "--easy-pairs", "M11::M0", "M9::M23"]) == 0
    chk = json.loads((out / "results.json").read_text())["groups"][0]["checklist"]
    assert chk["pairs_from"] == "given" and chk["pairs"]["easy"] == [["M11", "M0"], ["M9", "M23"]]
    ok = frame.drop(index=sorted(bad))
    expected = np.mean([stats.ks_2samp(ok.loc[ok.system == a, "bartscore_s_h"],
                                       ok.loc[ok.system == b, "bartscore_s_h"]).statistic
                        for a, b in [("M11", "M0"), ("M9", "M23")]])
    assert chk["system_ks"]["easy"]["bartscore_s_h"] == pytest.approx(expected)
    _check_pngs(out / "summeval")


def test_report_from_demo_like_layout(shared_data, tmp_path):
    """`<out>/<metric>/<shard>.parquet` per metric run, two datasets, errors in one run only."""
    summ = pd.read_parquet(shared_data / "corpora" / "summeval.parquet").iloc[:320]
    ctrl = pd.read_parquet(shared_data / "corpora" / "ctrleval_senti.parquet")
    carried = ["id", "dataset", "system", "doc_id"]
    root = tmp_path / "demo"
    for name, frame in (("summeval", summ), ("ctrleval_senti", ctrl)):
        humans = [c for c in frame.columns if c.startswith("human_")]
        words = frame[carried + humans].assign(text_stats_words=frame["text"].str.split().str.len().astype(float),
                                               error=None, warning=None, signature="metric:text_stats|v:1",
                                               row_key="k")
        chars = frame[carried + humans].assign(chars=frame["text"].str.len().astype(float),
                                               error=None, warning=None, signature="metric:chars|v:1", row_key="k")
        if name == "ctrleval_senti":  # this run fails on every ctrleval row (like BARTScore without a source)
            chars = chars.assign(chars=np.nan, error="KeyError: source")
        for run, table in (("text_stats", words), ("chars", chars)):
            (root / run).mkdir(parents=True, exist_ok=True)
            table.to_parquet(root / run / f"{name}-00000.parquet", index=False)
    out = tmp_path / "out"
    assert job.main(["--scores", str(root), "--out", str(out), "--resamples", "20", "--tasks", "0",
                     "--methods", "kendall"]) == 0
    results = json.loads((out / "results.json").read_text())
    assert results["input"]["rows_in"] == len(summ) + len(ctrl)
    assert results["input"]["rows_error"] == len(ctrl)
    groups = {g["name"]: g for g in results["groups"]}
    assert set(groups) == {"summeval", "ctrleval-senti"}
    assert groups["ctrleval-senti"]["metrics"] == ["text_stats_words"]  # chars errored everywhere there
    assert set(groups["summeval"]["metrics"]) == {"text_stats_words", "chars"}
    value = {(r["metric"], r["human"], r["level"]): r["value"] for r in groups["ctrleval-senti"]["correlations"]}
    expected = stats.kendalltau(ctrl["text"].str.split().str.len(), ctrl["human_coherence"]).statistic
    assert value[("text_stats_words", "human_coherence", "sample")] == pytest.approx(expected)
    transfer = results["transfer"]["human_coherence"]
    assert transfer["columns"] == ["ctrleval-senti", "summeval"]
    for folder in ("summeval", "ctrleval-senti"):
        _check_pngs(out / folder)


def test_report_on_wmt_darr_scores(shared_data, tmp_path):
    src = pd.read_parquet(shared_data / "corpora" / "wmt19_darr_kk_en.parquet").iloc[:2000]
    scores = src[["id", "dataset", "system", "doc_id", "human_darr_better"]].assign(
        text_stats_words=src["text"].str.split().str.len().astype(float),
        chars=src["text"].str.len().astype(float), error=None, signature="metric:x|v:1")
    scores.to_parquet(tmp_path / "wmt.parquet", index=False)
    out = tmp_path / "out"
    assert job.main(["--scores", str(tmp_path / "wmt.parquet"), "--out", str(out), "--resamples", "40",
                     "--tasks", "0"]) == 0
    [group] = json.loads((out / "results.json").read_text())["groups"]
    assert group["humans"] == [] and group["correlations"] == []
    [block] = group["significance"]
    assert block["level"] == "darr" and block["n_rows"] == 2000
    better = src[src["human_darr_better"] == 1].set_index("doc_id")["text"].str.len()
    worse = src[src["human_darr_better"] == 0].set_index("doc_id")["text"].str.len()
    expected = np.where(better > worse.reindex(better.index), 1, -1).mean()
    assert group["darr"]["chars"]["value"] == pytest.approx(expected)
    assert block["intervals"]["chars"]["value"] == pytest.approx(expected)
    assert "chars > text_stats_words" not in block["comparisons"]  # pairs are ordered as the metrics
    assert "text_stats_words > chars" in block["comparisons"]
    _check_pngs(out / "wmt19-kk-en")
