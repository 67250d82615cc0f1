"""Meta-evaluation pipeline and report: typed results, JSON, a self-contained HTML report with the
Markdown beside it, one sign convention in every table, no placeholder images, refusals."""

from __future__ import annotations

import json
import re

import matplotlib.image as mpimg
import numpy as np
import pandas as pd
import pytest
from scipy import stats

from meta_eval import io, pipeline, report
from meta_eval.results import MetaResult
from scoring.errors import InputError, UsageError


def _check_png(path):
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", path
    image = mpimg.imread(path)
    assert image.shape[0] >= 300 and image.shape[1] >= 500, path
    assert float(np.std(image[..., :3])) > 0.01, f"{path} is blank"


def _check_self_contained(out):
    """HTML embeds every image as data: URIs and links no file; every Markdown image exists."""
    html = (out / "report.html").read_text()
    assert "<table>" in html
    srcs = re.findall(r'<img[^>]*src="([^"]*)"', html)
    assert srcs and all(s.startswith("data:image/png;base64,") for s in srcs)
    assert not re.search(r'(src|href)="(?!data:|#|https?:)[^"]+"', html)
    md = (out / "report.md").read_text()
    images = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", md)
    assert len(images) == len(srcs)
    for path in images:
        _check_png(out / path)
    on_disk = {str(p.relative_to(out)) for p in out.rglob("*.png")}
    assert on_disk == set(images)  # no image written that the report does not show
    return md


def _md_rows(md: str, first_cell: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in md.splitlines()
            if line.startswith(f"| {first_cell} |")]


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
    half = len(out) // 2
    out.iloc[:half].to_parquet(folder / "part-00000.parquet", index=False)
    out.iloc[half:].to_parquet(folder / "part-00001.parquet", index=False)
    return folder, out, set(bad)


@pytest.fixture(scope="module")
def persona_report(shared_data, tmp_path_factory):
    table = io.read_table(str(shared_data / "checklist" / "usr_persona_chat.csv"),
                          metrics=["perplexity", "bleu", "rouge1", "cohere_met", "bert_f1_src"])
    opts = pipeline.Options(methods=["spearman", "kendall"], resamples=40, trials=200)
    result = pipeline.run_meta(table, opts)
    out = tmp_path_factory.mktemp("persona")
    paths = report.write_report(result, out)
    return table, result, out, paths


def test_checklist_csv_report_numbers(persona_report):
    table, result, out, paths = persona_report
    assert isinstance(result, MetaResult)
    group = result.group("usr_persona_chat")
    assert group.checklist.ks("easy", "human_Understandable") == pytest.approx(0.058333, abs=1e-6)
    assert group.checklist.similarity("easy", "perplexity", "human_Overall") == pytest.approx(5 / 9)
    assert len(group.significance) == 6  # significance for every human aspect
    assert {b.human for b in group.significance} == set(table.humans)
    saved = json.loads(paths["json"].read_text())
    assert saved["options"]["resamples"] == 40 and saved["options"]["significance"] == "bootstrap"
    assert saved["groups"][0]["checklist"]["system_ks"][0].keys() == {"kind", "column", "value"}
    assert '"resamples":40' in result.signature


def test_html_is_self_contained_and_markdown_beside_it(persona_report):
    _, result, out, paths = persona_report
    assert {"html", "md", "json", "leaderboard_csv", "leaderboard_json"} <= set(paths)
    md = _check_self_contained(out)
    assert "Significance: human_Overall, sample level, spearman" in md
    assert md.count("Sign convention") == 1


def test_one_sign_convention_in_every_table(persona_report):
    table, result, out, _ = persona_report
    md = (out / "report.md").read_text()
    frame = table.frame
    for human in table.humans:
        expected = stats.spearmanr(-frame["perplexity"], frame[human]).statistic  # negated: lower is better
        group = result.group("usr_persona_chat")
        assert group.correlation("perplexity", human, "sample", "spearman").value == pytest.approx(expected)
        block = next(b for b in group.significance if b.human == human)
        assert block.intervals[0].metric == "perplexity" and block.intervals[0].value == pytest.approx(expected)
        # the Markdown: correlation table row and significance table row print the same number
        corr_row = next(r for r in _md_rows(md, "perplexity") if r[1] == human)
        assert float(corr_row[2]) == pytest.approx(expected, abs=5e-5)
    printed = {r[1] for r in _md_rows(md, "perplexity") if len(r) == 4}  # significance interval tables
    corr_printed = {r[2] for r in _md_rows(md, "perplexity") if r[1] in table.humans}  # correlation table
    assert printed == corr_printed  # every perplexity correlation appears with one sign in both kinds of table


def test_leaderboard_in_report_and_files(persona_report):
    table, result, out, _ = persona_report
    board = pd.read_csv(out / "leaderboard.csv")
    ppl = board[board["column"] == "perplexity"].sort_values("rank")
    means = table.frame.groupby(["doc_id", "system"])["perplexity"].mean().unstack().dropna().mean()
    assert ppl["system"].tolist() == means.sort_values().index.tolist()  # lowest perplexity ranks first
    assert ppl["mean"].to_numpy() == pytest.approx(means.sort_values().to_numpy())
    assert "### Systems compared (leaderboard)" in (out / "report.md").read_text()
    page = (out / "leaderboard.html").read_text()  # the compare page, linked from the report
    assert "`leaderboard.html`, beside this report" in (out / "report.md").read_text()
    for column in set(board["column"]):
        assert f'data-column="{column}"' in page
    order = [page.index(f">{system}<") for system in ppl["system"]]  # ranked rows in rank order
    assert order == sorted(order)


def test_scoring_job_output_report(shared_data, tmp_path):
    folder, frame, bad = _scores_like_output(shared_data, tmp_path)
    table = io.read_table(str(folder))
    opts = pipeline.Options(boot_levels=["sample", "document", "system"], resamples=30, seed=7, trials=100)
    result = pipeline.run_meta(table, opts)
    assert result.input.rows_in == len(frame) and result.input.rows_error == len(bad)
    assert result.input.metrics == ("bartscore_s_h", "perplexity", "text_stats_words")
    [group] = result.groups
    ok = frame.drop(index=sorted(bad))
    expected = stats.spearmanr(ok["bartscore_s_h"], ok["human_coherence"]).statistic
    assert group.correlation("bartscore_s_h", "human_coherence", "sample", "spearman").value == pytest.approx(expected)
    means = ok.groupby("system")[["perplexity", "human_fluency"]].mean()
    expected = stats.kendalltau(-means["perplexity"], means["human_fluency"]).statistic
    assert group.correlation("perplexity", "human_fluency", "system", "kendall").value == pytest.approx(expected)
    assert {(b.human, b.level) for b in group.significance} == {
        (h, lvl) for h in table.humans for lvl in ("sample", "document", "system")}
    assert all(b.n_rows == len(ok) for b in group.significance)
    assert "seed:7" in group.significance[0].signature
    out = tmp_path / "report"
    report.write_report(result, out)
    _check_self_contained(out)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_ray_runner_gives_the_same_report_numbers(ray_local, shared_data, tmp_path):
    from meta_eval.results import to_json_dict
    from ray_jobs.runners import ray_runner

    folder, _, _ = _scores_like_output(shared_data, tmp_path)
    table = io.read_table(str(folder))
    opts = pipeline.Options(boot_levels=["sample", "document"], resamples=50, trials=100, run_checklist=False)
    local = pipeline.run_meta(table, opts)
    remote = pipeline.run_meta(table, opts, runner=ray_runner(2))
    assert to_json_dict(local) == to_json_dict(remote)


def test_subsample_significance_is_named_in_the_report(shared_data, tmp_path):
    folder, _, _ = _scores_like_output(shared_data, tmp_path)
    table = io.read_table(str(folder), humans=["human_coherence"])
    opts = pipeline.Options(boot_levels=["document"], significance="bartscore_subsample", draws=200,
                            run_checklist=False, compare_systems=False)
    result = pipeline.run_meta(table, opts)
    [block] = result.groups[0].significance
    assert block.test == "bartscore_subsample" and block.level == "document"
    assert all(c.draws == 200 and c.significant == (c.wins > 190) for c in block.comparisons)
    out = tmp_path / "r"
    report.write_report(result, out)
    md = (out / "report.md").read_text()
    assert "Test: BARTScore paper's subsample test" in md and "A wins" in md
    with pytest.raises(UsageError, match="significance"):
        pipeline.run_meta(table, pipeline.Options(significance="t-test"))
    opts = pipeline.Options.from_mapping({"significance": "bartscore_subsample", "alpha": 0.01})
    assert opts.significance == "bartscore_subsample" and opts.alpha == 0.01
    with pytest.raises(UsageError, match="'signifcance'"):
        pipeline.Options.from_mapping({"signifcance": "bootstrap"})
    with pytest.raises(UsageError, match="alpha"):
        pipeline.Options.from_mapping({"alpha": 5})


def test_sections_that_do_not_apply_are_left_out_with_a_reason(shared_data, tmp_path):
    table = io.read_table(str(shared_data / "checklist" / "ctrleval_topic.csv"), metrics=["perplexity", "relev_met"])
    result = pipeline.run_meta(table, pipeline.Options(resamples=20, methods=["spearman"]))
    [group] = result.groups
    assert group.omitted["system-level correlations"] == "one system only" or "system" in group.omitted[
        "system-level correlations"]
    assert "checklist system-level parts" in group.omitted
    out = tmp_path / "r"
    report.write_report(result, out)
    md = _check_self_contained(out)
    assert "### Left out" in md and "- checklist system-level parts: no system column." in md
    names = {p.name for p in (out / "ctrleval_topic").glob("*.png")}
    assert not any(n.startswith(("win_fractions", "preference_similarity", "checklist_system")) for n in names)


def test_wmt_darr_scores(shared_data, tmp_path):
    src = pd.read_parquet(shared_data / "corpora" / "wmt19_darr_kk_en.parquet").iloc[:2000]
    scores = src[["id", "dataset", "system", "doc_id", "human_darr_better"]].assign(
        text_stats_words=src["text"].str.split().str.len().astype(float),
        chars=src["text"].str.len().astype(float), error=None, signature="metric:x|v:1")
    scores.to_parquet(tmp_path / "wmt.parquet", index=False)
    result = pipeline.run_meta(io.read_table(str(tmp_path / "wmt.parquet")), pipeline.Options(resamples=40))
    [group] = result.groups
    assert group.humans == [] and group.correlations == []
    [block] = group.significance
    assert block.level == "darr" and block.n_rows == 2000
    better = src[src["human_darr_better"] == 1].set_index("doc_id")["text"].str.len()
    worse = src[src["human_darr_better"] == 0].set_index("doc_id")["text"].str.len()
    expected = np.where(better > worse.reindex(better.index), 1, -1).mean()
    assert next(d for d in group.darr if d.metric == "chars").value == pytest.approx(expected)
    assert block.intervals[1].metric == "chars" and block.intervals[1].value == pytest.approx(expected)
    out = tmp_path / "r"
    report.write_report(result, out)
    _check_self_contained(out)


def test_demo_like_layout_two_datasets(shared_data, tmp_path):
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
        if name == "ctrleval_senti":  # this run fails on every ctrleval row
            chars = chars.assign(chars=np.nan, error="KeyError: source")
        for run, table in (("text_stats", words), ("chars", chars)):
            (root / run).mkdir(parents=True, exist_ok=True)
            table.to_parquet(root / run / f"{name}-00000.parquet", index=False)
    result = pipeline.run_meta(io.read_table(str(root)), pipeline.Options(resamples=20, methods=["kendall"]))
    assert result.input.rows_in == len(summ) + len(ctrl)
    assert result.input.rows_error == len(ctrl)
    assert {g.name for g in result.groups} == {"summeval", "ctrleval-senti"}
    assert result.group("ctrleval-senti").metrics == ["text_stats_words"]
    expected = stats.kendalltau(ctrl["text"].str.split().str.len(), ctrl["human_coherence"]).statistic
    value = result.group("ctrleval-senti").correlation("text_stats_words", "human_coherence", "sample", "kendall")
    assert value.value == pytest.approx(expected)
    transfer = next(t for t in result.transfer if t.human == "human_coherence")
    assert transfer.datasets == ("ctrleval-senti", "summeval")
    out = tmp_path / "r"
    report.write_report(result, out)
    _check_self_contained(out)


def test_refuses_what_cannot_be_evaluated(shared_data, tmp_path):
    folder, frame, _ = _scores_like_output(shared_data, tmp_path)
    no_humans = frame.drop(columns=[c for c in frame.columns if c.startswith("human_")])
    no_humans.to_parquet(tmp_path / "nohuman.parquet", index=False)
    with pytest.raises(InputError, match="no human_"):
        pipeline.run_meta(io.read_table(str(tmp_path / "nohuman.parquet")))
    frame.assign(human_coherence=np.nan).to_parquet(tmp_path / "nan.parquet", index=False)
    with pytest.raises(InputError, match="'human_coherence' has no numeric value"):
        pipeline.run_meta(io.read_table(str(tmp_path / "nan.parquet")))


def test_missing_path_and_column_are_input_errors(shared_data, tmp_path):
    with pytest.raises(InputError, match="nothing-here"):
        io.read_table(str(tmp_path / "nothing-here"))
    folder, _, _ = _scores_like_output(shared_data, tmp_path)
    with pytest.raises(InputError, match="bleurt"):
        io.read_table(str(folder), metrics=["bleurt"])


def test_sign_convention_holds_in_the_transfer_table_too(shared_data, tmp_path):
    folder, frame, _ = _scores_like_output(shared_data, tmp_path)
    two = pd.concat([frame, frame.assign(id=frame["id"] + "-b", dataset="other",
                                         perplexity=frame["perplexity"] * 2 + 1)])
    two.to_parquet(tmp_path / "two.parquet", index=False)
    table = io.read_table(str(tmp_path / "two.parquet"), humans=["human_fluency"])
    result = pipeline.run_meta(table, pipeline.Options(resamples=0, methods=["spearman"], run_checklist=False))
    [transfer] = result.transfer
    row = transfer.values[transfer.metrics.index("perplexity")]
    for dataset, value in zip(transfer.datasets, row):
        corr = result.group(dataset).correlation("perplexity", "human_fluency", "sample", "spearman").value
        part = two[two["dataset"] == dataset].dropna(subset=["perplexity"])
        assert value == pytest.approx(corr) == pytest.approx(-stats.spearmanr(part["perplexity"],
                                                                             part["human_fluency"]).statistic)
    assert result.groups[0].omitted["significance"].startswith("turned off")
