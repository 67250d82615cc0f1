"""Hostile inputs against what landed in session 16 (docs/security.md): special-token warnings,
row accounts (constraints report, compmctg, splits --corpus), convert's bounds and compact ids,
the local Ray's socket room. Each test is a case that failed before its fix; what held is
listed in the session's report, not re-tested here."""

from __future__ import annotations

import json
import os

import pyarrow as pa
import pyarrow.parquet as pq

from tests.job_support import constraints_report_args

LONG_ID = "<b>**id**</b>\x1b[31m\u202e" + "A" * 200_000  # markup, an ANSI escape, a bidi control, 200 kB


def test_constraints_report_quotes_a_long_id_of_a_row_left_out_within_bounds(tmp_path, cli):
    """The first row without a system was named with the whole `repr` of its id: a 200 kB id made
    a 200 kB line in report.md, report.html, results.json and --json."""
    constraint = json.dumps({"task": "keyword", "label": ["apple"]})
    ids = ["k1", LONG_ID, "k3"]
    args = constraints_report_args(tmp_path, {"id": ids, "text": ["apple", "pear", "apple"], "constraint": [constraint] * 3,
                                              "system": ["A", None, "B"]},
                                   {"id": ids, "codi_success": [1.0, 0.0, 1.0], "error": [None] * 3})
    proc = cli(args + ["--json"])
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["rows_left_out"] == {"no system": 1}
    where = summary["rows_left_out_first"]["no system"]
    assert where.endswith(f"row 1 (id {LONG_ID[:80]!r}…({len(LONG_ID):,} characters))") and len(where) < 400
    assert len(proc.stdout) < 4_000
    results = json.loads((tmp_path / "report" / "results.json").read_text())
    assert results["rows"]["rows_left_out_first"] == {"no system": where}
    for name in ("report.md", "report.html"):
        text = (tmp_path / "report" / name).read_text()
        assert "AAAA" * 100 not in text and "<b>" not in text and "\x1b" not in text and "\u202e" not in text
    console = cli(args).stdout
    assert f"first no system: {where}" in console and max(map(len, console.splitlines())) < 600


def test_constraints_report_quotes_a_long_id_of_an_unknown_task(tmp_path, cli):
    """The error naming a row whose constraint has no known task quoted its whole id."""
    ids = [LONG_ID, "k2"]
    args = constraints_report_args(
        tmp_path, {"id": ids, "text": ["apple", "pear"],
                   "constraint": [json.dumps({"task": "nonsense"}), json.dumps({"task": "keyword", "label": ["a"]})],
                   "system": ["A", "A"]},
        {"id": ids, "codi_success": [1.0, 0.0], "error": [None] * 2})
    proc = cli(args + ["--json"])
    assert proc.returncode == 1
    error = json.loads(proc.stdout)["error"]
    assert f"({len(LONG_ID):,} characters)" in error and len(error) < 600


def test_score_names_a_long_duplicate_id_across_shards_within_bounds(tmp_path, cli):
    """An id in two shards of a folder was named with its whole `repr`: a 200 kB error line."""
    dump = tmp_path / "dump"
    dump.mkdir()
    for name in ("a", "b"):
        pq.write_table(pa.table({"id": [LONG_ID, f"own-{name}"], "text": ["one", "two"]}), dump / f"{name}.parquet")
    proc = cli(["score", "-m", "text_stats", "-i", dump, "-o", tmp_path / "o.parquet", "--json"])
    assert proc.returncode == 1
    error = json.loads(proc.stdout)["error"]
    assert "duplicate id" in error and f"({len(LONG_ID):,} characters)" in error and len(error) < 800


def test_load_scores_names_a_long_duplicate_id_within_bounds(tmp_path):
    """`load_scores` of a flat folder with an id twice named its whole `repr`."""
    import pytest

    import ctgscore
    from scoring.errors import InputError

    run = tmp_path / "scores" / "run"
    run.mkdir(parents=True)
    for name in ("x", "y"):
        pq.write_table(pa.table({"id": [LONG_ID], "m": [1.0]}), run / f"{name}.parquet")
    with pytest.raises(InputError) as caught:
        ctgscore.load_scores(str(tmp_path / "scores"))
    assert f"({len(LONG_ID):,} characters)" in str(caught.value) and len(str(caught.value)) < 800


def test_splits_report_markdown_sets_the_row_account_apart_from_the_table():
    """The account line was appended to the aspects table with a leading line break escaped to
    a visible `\\n`: Markdown read it as one more table row beginning `\\n1 of 32 rows`."""
    from splits.report import report_markdown

    summary = {"A_iid": 0.9, "A_comp": 0.8, "P_iid": 10.0, "P_comp": 11.0, "dist3_iid": 0.5, "dist3_comp": 0.4,
               "gap": 0.1, "accuracy_per_aspect_iid": {"tense": 0.9}, "accuracy_per_aspect_comp": {"tense": 0.8}}
    reason = "tense key not valid UTF-8"
    report = {"protocol": "holdout", "n_splits": 1, "summary": summary,
              "rows": {"rows_in": 32, "rows_used": 31, "rows_left_out": {reason: 1},
                       "rows_left_out_first": {reason: "c.parquet: column 'tense', row 6"}},
              "values_not_utf8": {"text": 2}}
    text = report_markdown(report)
    lines = text.splitlines()
    assert "\\n" not in text
    account = next(k for k, line in enumerate(lines) if "rows left out" in line)
    assert lines[account].startswith("1 of 32 rows left out") and lines[account - 1] == ""
    values = next(k for k, line in enumerate(lines) if "Values not valid UTF-8" in line)
    assert lines[values].startswith("Values not valid UTF-8") and lines[values - 1] == ""


def test_job_config_expands_a_home_temp_dir(tmp_path):
    """`ray.temp_dir: ~/ray` was joined to the YAML's folder before `~` was expanded: a folder
    literally named `~` beside the YAML (input and output expand `~` first)."""
    from ray_jobs.config import parse_config

    data = {"input": str(tmp_path / "in"), "output": str(tmp_path / "out"), "metrics": [{"name": "text_stats"}],
            "ray": {"temp_dir": "~/raytmp"}}
    config = parse_config(data, base_dir=tmp_path)
    assert config.ray.temp_dir == os.path.join(os.path.expanduser("~"), "raytmp")


def test_local_ray_temp_dir_is_the_folder_ray_is_given(tmp_path, monkeypatch):
    """A relative or `~` temp folder given to `RaySession` is measured and passed to Ray as one
    absolute folder (Ray requires an absolute one); the check measured the relative path."""
    import pytest

    from ray_jobs.session import SOCKET_PATH_MAX, check_socket_room, local_ray_temp_dir
    from scoring.errors import UsageError

    deep = tmp_path / ("d" * 100)
    deep.mkdir()
    monkeypatch.chdir(deep)
    assert local_ray_temp_dir("r") == str(deep / "r")
    assert local_ray_temp_dir("~/r") == os.path.join(os.path.expanduser("~"), "r")
    assert len(str(deep / "r").encode()) > SOCKET_PATH_MAX - 60
    with pytest.raises(UsageError, match="too deep"):
        check_socket_room("r")  # short as written, deep where Ray would put it
    check_socket_room("/tmp/r")
    with pytest.raises(UsageError, match="too deep"):
        check_socket_room("/tmp/" + "\udcff" * 50)  # bytes not UTF-8 (surrogate escapes) count as bytes


def test_convert_names_at_most_max_reasons_distinct_drop_reasons(tmp_path, cli):
    """A reason may name a value of the data (a key named twice, an attribute's aspect): a file
    whose every line names another made one report line per row (50,000 lines of 200-character
    keys: 14 MB of console, 25 MB of --json from a 10 MB file), each key whole."""
    from ctgscore.convert.report import MAX_REASONS, OTHER

    rows = 3 * MAX_REASONS
    key = "k{}" + "x" * 300
    lines = ['{"id": "%d", "text": "t", "%s": 1, "%s": 2}' % (i, key.format(i), key.format(i)) for i in range(rows)]
    lines += [json.dumps({"id": f"a{i}", "text": "t", "attributes": {key.format(i): 1}}) for i in range(rows)]
    path = tmp_path / "keys.jsonl"
    path.write_text("\n".join(lines + ['{"id": "ok", "text": "fine"}']) + "\n")
    proc = cli(["convert", "-i", path, "-o", tmp_path / "o.parquet", "--json"])
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    assert summary["rows_written"] == 1 and sum(summary["dropped"].values()) == 2 * rows  # every row counted
    assert len(summary["dropped"]) == MAX_REASONS + 1 and summary["dropped"][OTHER] == 2 * rows - MAX_REASONS
    assert summary["examples"][OTHER] == [MAX_REASONS + 1, MAX_REASONS + 2, MAX_REASONS + 3]
    assert all(len(reason) < 200 for reason in summary["dropped"])  # each key quoted and cut
    assert f"line names the key 'k0{'x' * 78}'…(302 characters) twice in one object" in summary["dropped"]
    assert len(proc.stdout) < 40_000
    console = cli(["convert", "-i", path, "-o", tmp_path / "o.parquet"]).stdout.splitlines()
    assert console[-1] == "  columns left out, no row written has a value in them: attributes"  # its rows all dropped
    assert len(console) == 2 + MAX_REASONS + 1 + 1 and f"dropped {2 * rows - MAX_REASONS}: {OTHER}" in console[2]


def test_convert_names_a_long_duplicate_header_within_bounds(tmp_path, cli):
    name = "h" * 100_000
    path = tmp_path / "twice.csv"
    path.write_text(f"id,{name},{name}\na,b,c\n")
    proc = cli(["convert", "-i", path, "-o", tmp_path / "o.parquet", "--json"])
    assert proc.returncode == 1
    error = json.loads(proc.stdout)["error"]
    assert "header names column" in error and "(100,000 characters)" in error and len(error) < 500


def test_parquet_metadata_that_overstates_rows_does_not_read_one_row_a_batch():
    """A row group whose metadata said 10^15 bytes a row was read one row a batch for good (the
    observed size only ever raised the estimate): 200,000 rows took 5.3 s instead of 0.5 s. The
    estimate now halves after each batch of smaller rows; every row still comes once, in order,
    and no batch passes the byte bound the rows it holds justify."""
    from ctgscore.convert.readers import _row_group_batches

    rows = 50_000
    table = pa.table({"text": ["t" * 20] * rows, "n": list(range(rows))})
    opened = []

    def open_group(size):
        opened.append(size)
        return iter(table.to_batches(max_chunksize=size))

    max_bytes = 1 << 20
    batches = list(_row_group_batches(open_group, rows, 1e15, 10_000, max_bytes))
    assert [n for b in batches for n in b.column("n").to_pylist()] == list(range(rows))
    assert len(batches) < 100 and len(opened) < 60  # was 50,000 batches
    assert max(b.nbytes for b in batches) <= 2 * max_bytes
    honest = list(_row_group_batches(open_group, rows, table.nbytes / rows, 10_000, max_bytes))
    assert max(b.num_rows for b in honest) == 10_000 and sum(b.num_rows for b in honest) == rows


def test_parquet_metadata_that_understates_rows_still_bounds_batches():
    """The other lie (rows stored once in a dictionary, or metadata of 0 bytes): the estimate
    grows with the first batch that shows larger rows, as before."""
    from ctgscore.convert.readers import _row_group_batches

    rows = 2_000
    table = pa.table({"text": ["x" * 10_000] * rows})

    def open_group(size):
        return iter(table.to_batches(max_chunksize=size))

    max_bytes = 1 << 20
    batches = list(_row_group_batches(open_group, rows, 0.0, 10_000, max_bytes))
    assert sum(b.num_rows for b in batches) == rows
    assert all(b.nbytes <= 2 * max_bytes for b in batches[1:])  # the 16-row probe first, then fitted


def test_convert_refuses_a_rating_field_per_row(tmp_path, cli):
    """Each row naming another `human_<n>` field made one column per row in every row: 10,000
    rows of 45 bytes took 12 s and 1 GB (rows x rows cells). More rating fields than
    MAX_RATING_COLUMNS is an input error naming the count and the first ones, before a row is
    written."""
    from ctgscore.convert.rows import MAX_RATING_COLUMNS

    rows = MAX_RATING_COLUMNS + 1
    path = tmp_path / "ratings.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "text": "t", f"human_{i}": 1}) + "\n" for i in range(rows)))
    proc = cli(["convert", "-i", path, "-o", tmp_path / "o.parquet", "--json"])
    assert proc.returncode == 1 and not (tmp_path / "o.parquet").exists()
    error = json.loads(proc.stdout)["error"]
    assert f"{rows:,} distinct rating fields" in error and "'human_0', 'human_1'" in error and len(error) < 600
    path.write_text("".join(json.dumps({"id": str(i), "text": "t", f"human_{i % MAX_RATING_COLUMNS}": 1}) + "\n"
                            for i in range(rows)))
    assert cli(["convert", "-i", path, "-o", tmp_path / "o.parquet"]).returncode == 0  # at the cap: written
    assert len(pq.read_schema(tmp_path / "o.parquet").names) == 2 + MAX_RATING_COLUMNS


def test_convert_map_error_lists_fields_within_bounds(tmp_path, cli):
    """`--map` naming a field the data lacks listed every field of the file (20,000 distinct
    fields: a 2 MB error line)."""
    path = tmp_path / "fields.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "text": "t", f"f{i}": 1}) + "\n" for i in range(5_000)))
    proc = cli(["convert", "-i", path, "-o", tmp_path / "o.parquet", "--map", "text=nope", "--json"])
    assert proc.returncode == 2
    error = json.loads(proc.stdout)["error"]
    assert "no field 'nope'" in error and "more" in error and len(error) < 1_000


def test_compmctg_keeps_only_the_aspects_its_splits_read(tmp_path, cli):
    """A dump whose every row names one more aspect of its own: the join built one `attr:`
    column per such aspect, rows x rows cells (2,000 rows: 2,000 columns); only the aspects of
    the splits are kept now, and the table is that of the dump without the extra aspects."""
    import pandas as pd

    from meta_eval.compmctg import scored_rows

    combos = [("Positive", "Present"), ("Positive", "Past"), ("Negative", "Present"), ("Negative", "Past")]
    n = 2000
    ids = [f"r{i}" for i in range(n)]
    scores = pa.table({"id": ids, "dataset": ["toy"] * n, "system": ["s"] * n,
                       "attribute_accuracy_sentiment": [float(i % 3 != 0) for i in range(n)],
                       "attribute_accuracy_tense": [float(i % 2) for i in range(n)]})
    split = {"signature": {"protocol": "holdout"}, "aspects": {"sentiment": ["Positive", "Negative"],
                                                              "tense": ["Present", "Past"]},
             "splits": [{"seen": [dict(zip(("sentiment", "tense"), c)) for c in combos[:3]],
                         "unseen": [dict(zip(("sentiment", "tense"), c)) for c in combos[3:]], "divergence": 0.5}]}
    tables = {}
    for name, extra in (("hostile", True), ("plain", False)):
        folder = tmp_path / name
        folder.mkdir()
        attributes = [{"sentiment": combos[i % 4][0], "tense": combos[i % 4][1],
                       **({f"aspect{i}": "x"} if extra else {})} for i in range(n)]
        pq.write_table(pa.table({"id": ids, "attributes": pa.array([list(a.items()) for a in attributes],
                                                                   pa.map_(pa.string(), pa.string()))}),
                       folder / "dump.parquet")
        pq.write_table(scores, folder / "scores.parquet")
        (folder / "split.json").write_text(json.dumps(split))
        got = cli(["compmctg", "--dump", folder / "dump.parquet", "--scores", folder / "scores.parquet",
                   "--splits", f"toy={folder / 'split.json'}", "-o", folder / "table.json"])
        assert got.returncode == 0, got.stderr
        tables[name] = json.loads((folder / "table.json").read_text())
    assert tables["hostile"]["datasets"] == tables["plain"]["datasets"]
    frame, _ = scored_rows(str(tmp_path / "hostile" / "dump.parquet"), scores.to_pandas(),
                           aspects={"sentiment", "tense"})
    assert [c for c in frame.columns if c.startswith("attr:")] == ["attr:sentiment", "attr:tense"]
    assert isinstance(frame, pd.DataFrame) and len(frame) == n


def test_convert_says_why_a_jsonl_file_with_bare_cr_line_ends_is_not_json(tmp_path, cli):
    """JSONL lines end with \\n; a file ended by bare \\r reads as one line of several records,
    dropped as "not valid JSON" with no word of the line ends (it now says so)."""
    path = tmp_path / "mac.jsonl"
    path.write_bytes(b'{"id": "a", "text": "x"}\r{"id": "b", "text": "y"}\r')
    got = cli(["convert", "-i", path, "-o", tmp_path / "out.parquet"])
    assert got.returncode == 1
    assert "it holds carriage returns: are the file's lines ended by a bare \\r?" in got.stderr
    clean = tmp_path / "ok.jsonl"
    clean.write_bytes(b'{"id": "a", "text": "x"}\r\n{"id": "b", "text": "y"}\r\nnot json\r\n')
    got = cli(["convert", "-i", clean, "-o", tmp_path / "ok.parquet", "--json"])
    assert got.returncode == 0, got.stderr
    assert list(json.loads(got.stdout)["dropped"]) == ["line is not valid JSON"]  # \r\n line ends are no hint


def test_convert_names_at_most_twenty_fields_it_leaves_out(tmp_path, cli):
    """An input of 5,000 fields none of which is the text: the error listed every field (and the
    summary line too); 20 are named now, with how many more there are."""
    path = tmp_path / "wide.jsonl"
    path.write_text(json.dumps({f"field{i:05d}": "v" for i in range(5000)}) + "\n")
    got = cli(["convert", "-i", path, "-o", tmp_path / "out.parquet"])
    assert got.returncode == 1
    assert "field00018, field00019 and 4,980 more: name the text and id fields" in got.stderr
    assert len(got.stderr) < 2000
    with path.open("a") as out:  # one row that converts: the summary lists 1,000 and counts all
        out.write(json.dumps({"id": "a", "text": "x"}) + "\n")
    got = cli(["convert", "-i", path, "-o", tmp_path / "out.parquet", "--json", "--report", tmp_path / "r.json"])
    assert got.returncode == 0, got.stderr
    for data in (json.loads(got.stdout), json.loads((tmp_path / "r.json").read_text())):
        assert data["ignored_field_count"] == 5000 and len(data["ignored_fields"]) == 1000


def test_constraints_report_heads_its_lines_with_the_rows_in_and_names_firsts_in_count_order(tmp_path, cli):
    """Its first line counted the rows kept after the keys not UTF-8 (3 of 4), and the account's
    first rows came in another order than its counts."""
    constraint = json.dumps({"task": "keyword", "label": ["apple"]})
    ids = ["k1", "k2", "k3", "k4"]
    systems = pa.array([b"A", b"\xff", None, b"B"], pa.binary()).view(pa.string())
    args = constraints_report_args(tmp_path, {"id": ids, "text": ["apple"] * 4, "constraint": [constraint] * 4,
                                              "system": systems},
                                   {"id": ids, "codi_success": [1.0] * 4, "error": [None] * 4})
    got = cli(args + ["--json"])
    assert got.returncode == 0, got.stderr
    summary = json.loads(got.stdout)
    assert (summary["rows_in"], summary["rows_used"]) == (4, 2)
    assert list(summary["rows_left_out_first"]) == list(summary["rows_left_out"]) == \
        ["system key not valid UTF-8", "no system"]
    plain = cli(args)
    assert plain.stdout.splitlines()[0].startswith("constraints report: 4 rows -> ")
