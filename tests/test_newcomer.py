"""A newcomer's first hour: the README fits on a page and starts with the two commands, and
after the demo the README's leaderboard example and `compare --previous` on the demo report's
own leaderboard JSON both succeed; a second demo run reuses its report. The demo runs once per
test run (`demo_run` in conftest; it scores the sample rows with five metrics) and also serves
the job-output digest test."""

from __future__ import annotations

import pathlib
import shlex

import pytest

from ctgscore.testing.cli import run_cli

REPO = pathlib.Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def readme_command(prefix: str) -> list[str]:
    """The README's one command line that starts with `prefix`, as arguments after `ctgscore`."""
    lines = [line.strip() for line in README.splitlines() if line.strip().startswith(prefix)]
    assert len(lines) == 1, (prefix, lines)
    return shlex.split(lines[0])[1:]


def with_option(args: list[str], flag: str, value: str) -> list[str]:
    """`args` with the value after `flag` replaced."""
    k = args.index(flag)
    return args[:k + 1] + [value] + args[k + 2:]


def test_readme_fits_on_a_page_and_starts_with_the_two_commands():
    lines = README.splitlines()
    assert len(lines) <= 300
    assert lines[:4] == ["```bash", "make demo", "make test", "```"]
    assert ". .venv/bin/activate" in README  # how `ctgscore` gets on the PATH after `make demo`
    for target in ("demo:", "test:"):
        assert f"\n{target}" in (REPO / "Makefile").read_text()
    linked = [part.split(")", 1)[0] for part in README.split("](")[1:]]
    local = [link for link in linked if not link.startswith(("http", "#"))]
    absent = [link for link in local if not (REPO / link).exists()]
    assert not absent, absent


@pytest.fixture(scope="module")
def demo(demo_run):
    """The output folder of the session's one demo run (`demo_run` in conftest)."""
    return demo_run.output


@pytest.fixture(scope="module")
def ray_env(demo_run):
    """The environment the demo ran with (it joins the session's Ray): the commands below too."""
    return demo_run.env


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_after_the_demo_the_readme_leaderboard_example_runs(demo, ray_env, tmp_path):
    args = readme_command("ctgscore leaderboard")
    args = with_option(args, "-o", str(tmp_path / "leaderboard")) + ["--set", f"output={demo}", "--no-progress"]
    proc = run_cli(args, cwd=REPO, timeout=900, env=ray_env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "scored 0 new or changed rows" in proc.stdout  # the demo's scores are reused, nothing is re-scored
    assert (tmp_path / "leaderboard" / "board.html").is_file()


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_compare_previous_reads_the_demo_reports_own_leaderboard_json(demo, tmp_path):
    report = demo.parent / "demo-report"
    assert (report / "summeval" / "leaderboard_bartscore_s_h.png").is_file()  # the README's picture
    args = readme_command("ctgscore compare")
    args = with_option(args, "-s", str(demo))
    args = with_option(args, "-o", str(tmp_path / "board.html"))
    args = with_option(args, "--previous", str(report / "leaderboard.json"))
    proc = run_cli(args, cwd=REPO, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    import pyarrow.parquet as pq

    rows = sum(pq.read_metadata(path).num_rows for path in (REPO / "data" / "sample").glob("*.parquet"))
    assert f"from {rows} rows" in proc.stdout  # the input's rows, not once per metric run
    assert "since last" in (tmp_path / "board.html").read_text()  # the previous JSON was understood


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_an_unchanged_demo_rerun_reuses_scores_and_report(demo_run):
    proc = run_cli(demo_run.args, module="ctgscore.demo", cwd=REPO, timeout=900, env=demo_run.env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert " 0 scored" in proc.stdout and "report unchanged" in proc.stdout


def test_the_readme_s3_job_config_is_a_valid_config(tmp_path):
    block = README.split("# s3_job.yaml\n", 1)[1].split("```", 1)[0]
    path = tmp_path / "s3_job.yaml"
    path.write_text(block, encoding="utf-8")
    from ray_jobs.config import load_config

    config = load_config(path)
    assert config.input.startswith("s3://") and config.output.startswith("s3://")
    assert [m.name for m in config.metrics] == ["bartscore", "text_stats"]


RECORDED_DIGEST = pathlib.Path(__file__).parent / "data" / "job_sample_digest.json"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_job_output_on_the_sample_is_unchanged(demo_run):
    """The demo's job is the sample run: its output on `data/sample` with every metric of
    `make demo` (text_stats, BLEU, perplexity, BARTScore, CTRLEval on the tiny models) is the
    one recorded in `tests/data/job_sample_digest.json`: rows, ids, errors, skip reasons,
    schemas, footers and the manifest (less its clock times, paths and part sizes) exactly, and
    every score within 1e-6 relative (`tests.job_digest`: reproducible across CPUs and GPUs,
    whose float kernels differ in the last bits; the tiny models themselves are the same bytes
    everywhere). It lives here, beside the other tests of the one demo run, so that run happens
    once under `pytest -n` too. To record anew after a deliberate change:
    `python -m tests.job_digest`."""
    import json

    from tests.job_digest import compare

    recorded = json.loads(RECORDED_DIGEST.read_text())
    assert compare(demo_run.digest, recorded) == []


def _perturbed_copy(source: pathlib.Path, target: pathlib.Path, relative: float) -> pathlib.Path:
    """A copy of a job's output folder as another machine's float kernels would write it:
    every score value times (1 + `relative`), every part rewritten (so its bytes and size
    change), its footer metadata kept."""
    import shutil

    import pyarrow as pa
    import pyarrow.parquet as pq

    from scoring.schema import is_score_column

    shutil.copytree(source, target)
    for path in sorted(target.rglob("*.parquet")):
        table = pq.read_table(path)
        for field in table.schema:
            if pa.types.is_floating(field.type) and is_score_column(field.name):
                values = [None if v is None else v * (1 + relative) for v in table.column(field.name).to_pylist()]
                table = table.set_column(table.schema.get_field_index(field.name), field, pa.array(values, type=field.type))
        pq.write_table(table, path, compression="zstd")  # the schema metadata (the footer's key-values) comes along
    return target


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("relative, same", [(1e-9, True), (1e-4, False)])
def test_job_digest_tolerates_other_float_kernels_only(demo_run, tmp_path, relative, same):
    """A machine whose float kernels differ: the demo's output with every score perturbed by
    1e-9 relative (rewritten parts, other bytes and sizes) still matches the recorded digest;
    by 1e-4 it does not, and the difference is named as a score beyond the tolerance."""
    import json

    from tests.job_digest import compare, demo_digest

    recorded = json.loads(RECORDED_DIGEST.read_text())
    copy = _perturbed_copy(demo_run.as_run, tmp_path / "demo", relative)  # the folder as the first run left it
    part = sorted((copy / "bartscore" / "summeval-00000").glob("part-*.parquet"))[0]  # rows with scores
    assert part.read_bytes() != (demo_run.as_run / part.relative_to(copy)).read_bytes()  # other bytes, as another machine writes
    problems = compare(demo_digest(copy, REPO / ".cache" / "tiny-models", REPO / "data" / "sample", demo_run.output), recorded)
    if same:
        assert problems == []
    else:
        assert problems and all("beyond 1e-06 relative" in p for p in problems)
        assert any(p.startswith("bartscore/") for p in problems) and any(p.startswith("perplexity/") for p in problems)
