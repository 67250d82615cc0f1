"""More hostile data through the report and statistics commands (`meta`, `compare`, `splits`,
`compmctg`): each attack either comes out as text in the report or fails with one line naming
the file, the column and the row (docs/security.md, "Data: text, never markup, paths or code"),
never as an internal error."""

from __future__ import annotations

import html
import re

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctgscore.testing.cli import assert_user_error, run_cli_in_process

N = 12


def _not_utf8(values: list[str], row: int) -> pa.Array:
    """A Parquet string column whose value at `row` is not valid UTF-8 (a leading 0xff byte)."""
    raw = [v.encode() for v in values]
    raw[row] = b"\xff" + raw[row]
    return pa.array(raw, pa.binary()).view(pa.string())


def _scores(tmp_path, bad: str | None = None, row: int = 3):
    rng = np.random.default_rng(0)
    columns = {"id": [f"r{i}" for i in range(N)], "dataset": ["d"] * N, "system": ["A", "B"] * (N // 2),
               "doc_id": [f"doc{i // 2}" for i in range(N)], "m": rng.normal(size=N),
               "human_x": rng.integers(1, 5, size=N).astype(float)}
    table = pa.table({k: (_not_utf8(v, row) if k == bad else v) for k, v in columns.items()})
    path = tmp_path / f"scores_{bad}.parquet"
    pq.write_table(table, path)
    return path


@pytest.mark.parametrize("column", ["system", "dataset", "doc_id"])
def test_compare_leaves_out_a_key_that_is_not_utf8(tmp_path, column):
    """One row whose key is not text is left out and counted, its first row named; the
    command still writes its board (it failed whole before; tests/test_keys_not_utf8.py)."""
    path = _scores(tmp_path, column)
    proc = run_cli_in_process(["compare", "-s", path, "--resamples", "10", "--trials", "10",
                               "-o", str(tmp_path / "board.html")])
    assert proc.returncode == 0, proc.stderr
    line = (f"1 of {N} rows left out of every group (1 {column} key not valid UTF-8); {N - 1} used; "
            f"first {column} key not valid UTF-8: {path}: column '{column}', row 3")
    assert f"  left out: {line}" in proc.stdout.splitlines()
    assert html.escape(line) in (tmp_path / "board.html").read_text()


@pytest.mark.parametrize("column", ["system", "dataset", "doc_id"])
def test_meta_leaves_out_a_key_that_is_not_utf8(tmp_path, column):
    path = _scores(tmp_path, column)
    proc = run_cli_in_process(["meta", "-s", path, "-o", str(tmp_path / "rep"), "--resamples", "0",
                               "--metrics", "m", "--human-columns", "human_x"])
    assert proc.returncode == 0, proc.stderr
    line = (f"1 of {N} rows left out of every group (1 {column} key not valid UTF-8); {N - 1} used; "
            f"first {column} key not valid UTF-8: {path}: column '{column}', row 3")  # named as compare names it
    assert f"  left out: {line}" in proc.stdout.splitlines()
    assert line in (tmp_path / "rep" / "report.md").read_text()


def test_splits_names_a_corpus_value_that_is_not_utf8(tmp_path):
    """An aspect value that is not valid UTF-8 leaves its row out, counted and named (it failed
    the corpus; tests/test_keys_not_utf8_more.py checks the splits equal those without it)."""
    corpus = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"tense": _not_utf8(["x", "y", "x", "y"], 2), "topic": ["a", "a", "b", "b"]}), corpus)
    proc = run_cli_in_process(["splits", "--corpus", corpus, "--protocol", "holdout", "-o", str(tmp_path / "s.json")])
    assert proc.returncode == 0, proc.stderr
    assert (f"  left out: 1 of 4 rows left out of every group (1 tense key not valid UTF-8); 3 used; "
            f"first tense key not valid UTF-8: {corpus}: column 'tense', row 2") in proc.stdout.splitlines()


# pairs of systems that differ only by a control character and the text of its escape typed in
LOOK_ALIKES = ["sys\nA", "sys\\nA", "\x00", "\\x00", "tab\there", "tab\\there", "\u202eevil", "\\u202eevil"]


@pytest.fixture(scope="module")
def look_alike_scores(tmp_path_factory):
    root = tmp_path_factory.mktemp("alike")
    rng = np.random.default_rng(4)
    rows = [{"id": f"r{k}-{doc}", "dataset": "d", "system": system, "doc_id": f"doc{doc}", "m": float(rng.normal())}
            for k, system in enumerate(LOOK_ALIKES) for doc in range(4)]
    pq.write_table(pa.Table.from_pylist(rows), root / "scores.parquet")
    return root / "scores.parquet"


def _cell_texts(page: str, pattern: str) -> list[str]:
    return [html.unescape(re.sub(r"<[^>]*>", "", cell)) for cell in re.findall(pattern, page, re.S)]


def test_a_control_character_and_its_typed_escape_never_read_alike(look_alike_scores, tmp_path):
    from markdown_it import MarkdownIt

    for suffix in ("md", "html"):
        out = tmp_path / f"board.{suffix}"
        proc = run_cli_in_process(["compare", "-s", look_alike_scores, "-o", out, "--resamples", "10", "--trials", "10"])
        assert proc.returncode == 0, proc.stderr
        page = out.read_text()
        if suffix == "md":  # the leaderboard table: rank, system, mean, ...
            board = MarkdownIt("commonmark").enable("table").render(page).split("</table>")[0]
            cells = [row[1] for row in (_cell_texts(tr, r"<td>(.*?)</td>") for tr in re.findall(r"<tr>(.*?)</tr>", board, re.S))
                     if row]
        else:
            board = page.split('<table class="board')[1].split("</table>")[0]
            cells = _cell_texts(board, r'<td class="sys">(.*?)</td>')
            labels = _cell_texts(page, r'text-anchor="end">(.*?)</text>')  # the matrix rows
            assert len(labels) == len(LOOK_ALIKES) == len(set(labels)), labels
        assert len(cells) == len(LOOK_ALIKES) == len(set(cells)), cells
        assert "sys\\nA" in cells  # the newline shown as its escape, as before


def test_display_name_marks_a_typed_escape_and_leaves_other_backslashes():
    from scoring.display_names import display_name, is_cut

    assert display_name("sys\nA") == "sys\\nA" and not is_cut("sys\nA")
    assert is_cut("sys\\nA") and display_name("sys\\nA").startswith("sys\\nA…[6 characters, sha256 ")
    for name in ("$\\frac{a}{b}$", "a\\b", "\\", "x\\y_z"):  # a backslash that reads as no escape is shown as it is
        assert display_name(name) == name and not is_cut(name)
    assert len({display_name(n) for n in LOOK_ALIKES + ["\\\x00", "\\\\x00"]}) == len(LOOK_ALIKES) + 2


COMBOS = [("P", "N"), ("P", "X"), ("Q", "N"), ("Q", "X")]


def compmctg_inputs(root, attributes=None, aspects=("s", "t")):
    """A dump of 8 rows with `attributes`, their stored scores (dataset `toy`) and a Hold-Out
    splits JSON over `aspects`; returns the compmctg arguments before `--splits`."""
    ids = [f"r{i}" for i in range(8)]
    if attributes is None:
        attributes = pa.array([[("s", COMBOS[i % 4][0]), ("t", COMBOS[i % 4][1])] for i in range(8)],
                              type=pa.map_(pa.string(), pa.string()))
    pq.write_table(pa.table({"id": ids, "attributes": attributes}), root / "dump.parquet")
    pq.write_table(pa.table({"id": ids, "dataset": ["toy"] * 8, "attribute_accuracy": [1.0, 0.5] * 4,
                             "attribute_accuracy_s": [1.0, 0.0] * 4, "attribute_accuracy_t": [1.0] * 8,
                             "perplexity": [10.0] * 8}), root / "scores.parquet")
    side = lambda combos: [dict(zip(aspects, c)) for c in combos]  # noqa: E731
    splits = {"signature": {"protocol": "holdout"}, "aspects": {a: [] for a in aspects},
              "splits": [{"seen": side(COMBOS[:3]), "unseen": side(COMBOS[3:]), "divergence": 0.5}]}
    (root / "split.json").write_text(__import__("json").dumps(splits))
    return ["compmctg", "--dump", root / "dump.parquet", "--scores", root / "scores.parquet", "-o", root / "table.json"]


def test_compmctg_names_a_dump_attribute_that_is_not_utf8(tmp_path):
    offsets = pa.array(range(0, 17, 2), pa.int32())
    keys = pa.array(["s", "t"] * 8)
    values = pa.array([b"P", b"\xffN"] + [b"Q", b"X"] * 7, pa.binary()).view(pa.string())
    args = compmctg_inputs(tmp_path, pa.MapArray.from_arrays(offsets, keys, values))
    proc = run_cli_in_process(args + ["--splits", f"toy={tmp_path / 'split.json'}"])
    assert proc.returncode == 0, proc.stderr  # its row is left out, counted and named (it failed the command)
    assert f"first attributes key not valid UTF-8: {tmp_path / 'dump.parquet'}: column 'attributes', row 0" in proc.stdout


def test_compmctg_quotes_a_huge_aspect_of_a_splits_json_in_a_short_line(tmp_path):
    import json

    args = compmctg_inputs(tmp_path, aspects=("s", "t" * 100_000))  # an aspect the dump does not have
    proc = run_cli_in_process(args + ["--splits", f"toy={tmp_path / 'split.json'}"])
    line = assert_user_error(proc, 1, "no attribute values for aspect(s)", "100,000 characters")
    assert len(line) < 400 + 2 * len(str(tmp_path))
    splits = json.loads((tmp_path / "split.json").read_text())
    splits["splits"][0]["unseen"] = [{"s": "Q"}]  # a combination without the huge aspect
    (tmp_path / "split.json").write_text(json.dumps(splits))
    proc = run_cli_in_process(args + ["--splits", f"toy={tmp_path / 'split.json'}"])
    line = assert_user_error(proc, 1, "must be a string or a number", "100,000 characters")
    assert len(line) < 400 + 2 * len(str(tmp_path))


class CountedName(str):
    """A name that counts how often it is formatted (an old-format history key is joined from them)."""

    formats = 0

    def __format__(self, spec):
        CountedName.formats += 1
        return str.__format__(self, spec)


def test_an_old_history_line_is_split_in_time_linear_in_its_keys(tmp_path):
    import json

    from meta_eval.report.history import read_history

    n = 400
    known = [(CountedName(f"d{i}"), CountedName(f"c{i}")) for i in range(n)]
    (tmp_path / "history.jsonl").write_text(json.dumps({"refreshed": "t", "leaders": {f"d{i}/c{i}": "s" for i in range(n)}}))
    CountedName.formats = 0
    (record,) = read_history(tmp_path / "history.jsonl", known)
    assert [(e["dataset"], e["column"]) for e in record["leaders"]] == [(f"d{i}", f"c{i}") for i in range(n)]
    assert CountedName.formats <= 2 * n  # each known pair joined once (it was once per key: n^2)


class CountedLeaders(list):
    iterations = 0

    def __iter__(self):
        CountedLeaders.iterations += 1
        return super().__iter__()


def test_a_refresh_reads_each_history_line_once_whatever_the_number_of_columns():
    from ctgscore.cli.leaderboard import _changes
    from tests.test_leaderboard_history import comparison

    columns, refreshes = 30, 20
    comparisons = [comparison("toy", f"m{k}", "x") for k in range(columns)]
    records = [{"refreshed": f"t{r}", "leaders": CountedLeaders({"dataset": "toy", "column": f"m{k}", "system": "x"}
                                                                for k in range(columns))} for r in range(refreshes)]
    CountedLeaders.iterations = 0
    lines = _changes(comparisons, None, records)
    assert lines[0] == f"  toy / m0: leader x 2; leader since t0 ({refreshes} refreshes)"
    assert len(lines) == columns and CountedLeaders.iterations <= refreshes  # was columns x refreshes


def test_a_history_line_whose_time_is_no_string_is_a_problem_line(tmp_path, capsys):
    import json

    from meta_eval.report.history import leader_since, read_history

    good = {"format": 2, "refreshed": "t1", "leaders": [{"dataset": "toy", "column": "m", "system": "x"}]}
    bad = [{**good, "refreshed": {"at": 1}}, {**good, "refreshed": "t" * 10_000}, {**good, "refreshed": 5}]
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [good] + bad + [good]))
    records = read_history(tmp_path / "history.jsonl")
    assert [r.get("line") for r in records] == [None, 2, 3, 4, None]
    assert all(r["problem"].startswith("refreshed is not a time") for r in records[1:4])
    assert leader_since([r for r in records if "problem" not in r], "toy", "m", "x") == ("t1", 2)


def _constraints_report(tmp_path, rows, scores=None):
    scores_path = tmp_path / "codi_scores.parquet"
    if isinstance(scores, pa.Table):
        pq.write_table(scores, scores_path)
    else:
        pq.write_table(pa.Table.from_pylist(scores or [{"id": "a", "codi_success": 1.0}, {"id": "b", "codi_success": 0.0}]),
                       scores_path)
    rows_path = tmp_path / "codi_rows.parquet"
    if isinstance(rows, bytes):
        rows_path.write_bytes(rows)
    else:
        pq.write_table(rows, rows_path)
    proc = run_cli_in_process(["constraints", "report", "-i", rows_path, "--scores", scores_path,
                               "-o", str(tmp_path / "report")])
    return proc, rows_path, scores_path


@pytest.mark.parametrize("rows, fragments", [
    (b"hello", ["cannot read it as Parquet"]),
    (pa.table({"text": ["x", "y"]}), ["no 'id' column"]),
    (pa.table({"id": [["a"], ["b"]], "text": ["x", "y"]}), ["column 'id' has type list"]),
    (pa.table({"id": ["a", "b"], "text": _not_utf8(["x", "y"], 1)}), ["row 1: column 'text' is not valid UTF-8"]),
])
def test_constraints_report_names_an_unreadable_input(tmp_path, rows, fragments):
    proc, rows_path, _ = _constraints_report(tmp_path, rows)
    assert_user_error(proc, 1, f"input {rows_path}", *fragments)


def test_constraints_report_quotes_a_huge_repeated_id_in_a_short_line(tmp_path):
    huge = "a" * 100_000
    proc, _, scores_path = _constraints_report(tmp_path, pa.table({"id": [huge, huge], "text": ["x", "y"]}))
    line = assert_user_error(proc, 1, "is on more than one row", "100,000 characters")
    assert len(line) < 400 + len(str(tmp_path))
    proc, _, _ = _constraints_report(tmp_path, pa.table({"id": [huge, "b"], "text": ["x", "y"]}),
                                     pa.table({"id": ["b"], "codi_success": [1.0]}))
    line = assert_user_error(proc, 1, "1 rows have no score, e.g. id", "100,000 characters")
    assert len(line) < 400 + len(str(tmp_path))


def test_a_huge_dataset_that_cannot_be_compared_is_skipped_in_a_short_line(tmp_path):
    import json

    huge = "D" * 100_000
    rows = [{"id": f"{d}{s}{k}", "dataset": d, "system": s, "doc_id": f"doc{k}", "m": float(k), "n": float(-k)}
            for d, systems in (("toy", "AB"), (huge, "A")) for s in systems for k in range(3)]
    path = tmp_path / "scores.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    proc = run_cli_in_process(["--json", "compare", "-s", path, "--resamples", "10", "--trials", "10",
                               "-o", str(tmp_path / "board.json")])
    assert proc.returncode == 0, proc.stderr
    (line,) = json.loads(proc.stdout)["skipped"]
    assert "2 columns (m, n): comparing systems needs two or more systems, found 1" in line
    assert "100,000 characters" in line and len(line) < 400


def test_meta_names_why_a_column_was_not_compared_whatever_the_dataset_name(tmp_path):
    import json

    rng = np.random.default_rng(2)
    rows = [{"id": f"{s}{d}", "system": s, "doc_id": f"doc{d}", "dataset": "a: b, column 'x': c", "m": float(rng.normal()),
             "m2": float(rng.normal()) if s == "A" else None, "human_x": float(rng.integers(1, 5))}
            for s in "AB" for d in range(6)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "scores.parquet")
    proc = run_cli_in_process(["meta", "-s", tmp_path / "scores.parquet", "-o", str(tmp_path / "rep"), "--resamples", "10",
                               "--trials", "10", "--no-checklist", "--metrics", "m", "m2", "--human-columns", "human_x"])
    assert proc.returncode == 0, proc.stderr
    (group,) = json.loads((tmp_path / "rep" / "results.json").read_text())["groups"]
    assert group["omitted"]["system comparison of m2"] == "no doc_id has a finite score for every system"


@pytest.fixture
def stubbed_refresh(tmp_path, monkeypatch):
    """`ctgscore leaderboard` with its scoring job stubbed (as tests/test_leaderboard_history.py
    does): `refresh(board)` runs one refresh into the folder `board`."""
    import types

    from ray_jobs import score_corpus

    rows = [{"id": f"{s}-{d}", "dataset": "toy", "system": s, "doc_id": f"d{d}", "m": float(d) + 3 * (s == "sysB")}
            for s in ("sysA", "sysB") for d in range(6)]
    scores = tmp_path / "scores.parquet"
    pq.write_table(pa.Table.from_pylist(rows), scores)
    manifest = {"output": str(scores), "metrics": {"stub": {"rows_scored": 0, "rows_cached": 12}}}
    monkeypatch.setattr(score_corpus, "load_config", lambda path, overrides=None: types.SimpleNamespace())
    monkeypatch.setattr(score_corpus, "run_job", lambda config: manifest)
    monkeypatch.setattr(score_corpus, "error_rate_exceeded", lambda manifest: [])
    (tmp_path / "job.yaml").write_text("stub: true\n")

    def refresh(board):
        return run_cli_in_process(["leaderboard", tmp_path / "job.yaml", "-o", board, "--columns", "m",
                                   "--resamples", "20", "--trials", "20", "--no-progress"])

    return refresh


@pytest.mark.timeout(120)
def test_a_fifo_or_folder_named_history_jsonl_fails_the_refresh_instead_of_hanging(tmp_path, stubbed_refresh):
    import os

    for kind in ("fifo", "folder"):
        board = tmp_path / kind
        board.mkdir()
        if kind == "fifo":
            os.mkfifo(board / "history.jsonl")  # opened for writing it waited for a reader forever
        else:
            (board / "history.jsonl").mkdir()
        proc = stubbed_refresh(board)
        assert_user_error(proc, 1, str(board / "history.jsonl"), "it must be a regular file")


def test_a_folder_named_leaderboard_json_is_named_as_the_previous_board_not_a_flag(tmp_path, stubbed_refresh):
    board = tmp_path / "board"
    (board / "leaderboard.json").mkdir(parents=True)
    proc = stubbed_refresh(board)
    line = assert_user_error(proc, 2, "the previous refresh's board", "not a regular file")
    assert "--previous" not in line  # the leaderboard command has no such flag
