"""A key that is not valid UTF-8 leaves only its own row out in the commands beyond `meta`,
`compare` and `leaderboard` (tests/test_keys_not_utf8.py): `constraints report`, `splits --corpus`
(its partitions and report too), `compmctg` and `load_scores`; a key column stored as Parquet
`binary` (no UTF-8 annotation) is read as the text it holds, its other bytes left out the same
way. Each row left out is counted under "<key> key not valid UTF-8" with its first row named;
the other rows' numbers are those of the same data without the bad rows, and nothing is decoded
with replacement characters. Before, each of these failed the whole command."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from scoring.codi import TASKS

BAD = b"\xff\xfe"


def account_of(summary: dict) -> dict:
    """The row account a command's --json summary gives, flat as every command gives it."""
    return {key: value for key, value in summary.items() if key.startswith("rows_")}


def text_column(values, bad_rows=(), kind="string"):
    """`values` as an Arrow column of `kind` ("string" or "binary"), the rows in `bad_rows` holding BAD."""
    raw = [None if v is None else str(v).encode() for v in values]
    for row in bad_rows:
        raw[row] = BAD
    array = pa.array(raw, pa.binary())
    return array.view(pa.string()) if kind == "string" else array


def without(columns: dict[str, list], rows) -> dict[str, list]:
    return {name: [v for k, v in enumerate(values) if k not in set(rows)] for name, values in columns.items()}


# ----- constraints report ----------------------------------------------------------------------
def codi_rows(systems=("good", "bad"), per_task=4):
    """Canonical CoDI rows of every task for each system, and their stored scores (system k
    passes about 1 in k + 1)."""
    rows = {"id": [], "system": [], "doc_id": [], "constraint": [], "text": []}
    scores = {"id": [], "codi_success": [], "codi_toxicity": [], "error": [], "signature": []}
    for k, system in enumerate(systems):
        for task in TASKS:
            for n in range(per_task):
                row_id = f"{system}-{task}-{n}"
                rows["id"].append(row_id)
                rows["system"].append(system)
                rows["doc_id"].append(f"{task}-{n}")
                rows["constraint"].append(json.dumps({"task": task, "context_id": f"c{n // 2}"}))
                rows["text"].append(f"answer {n} of {system} on {task} with words {n % 3}")
                scores["id"].append(row_id)
                scores["codi_success"].append(float((n + k) % (k + 1) == 0))
                scores["codi_toxicity"].append(0.1 + 0.2 * ((n + k) % 3) if task == "detoxic" else None)
                scores["error"].append(None)
                scores["signature"].append("metric:codi|v:test")
    return rows, scores


def write_codi(path, columns, bad: dict[str, tuple] = (), kinds: dict = ()):
    arrays = {name: (text_column(values, dict(bad).get(name, ()), dict(kinds).get(name, "string"))
                     if name in dict(bad) or name in dict(kinds) else pa.array(values))
              for name, values in columns.items()}
    pq.write_table(pa.table(arrays), path)
    return str(path)


@pytest.mark.parametrize("key,kind", [("system", "string"), ("doc_id", "string"), ("id", "string"), ("system", "binary")])
def test_constraints_report_leaves_the_bad_row_out_and_reports_the_others_alike(tmp_path, cli, key, kind):
    rows, scores = codi_rows()
    bad_row = 5  # good / first task, row 1
    dirty_rows = write_codi(tmp_path / "dirty.parquet", rows, {key: (bad_row,)}, {key: kind})
    clean_rows = write_codi(tmp_path / "clean.parquet", without(rows, [bad_row]))
    score_file = write_codi(tmp_path / "scores.parquet", scores, {"id": (bad_row,)} if key == "id" else {})
    args = ["--scores", score_file, "--no-self-bleu", "--json"]
    got = cli(["constraints", "report", "-i", dirty_rows, "-o", tmp_path / "dirty", *args])
    assert got.returncode == 0, got.stderr
    assert cli(["constraints", "report", "-i", clean_rows, "-o", tmp_path / "clean", *args]).returncode == 0
    reason = f"{key} key not valid UTF-8"
    where = f"{dirty_rows}: column '{key}', row {bad_row}"
    summary = json.loads(got.stdout)
    assert account_of(summary) == {"rows_in": len(rows["id"]), "rows_used": len(rows["id"]) - 1,
                               "rows_left_out": {reason: 1}, "rows_left_out_first": {reason: where}}
    results = json.loads((tmp_path / "dirty" / "results.json").read_text())
    reference = json.loads((tmp_path / "clean" / "results.json").read_text())
    assert results["results"] == reference["results"] and results["systems"] == ["bad", "good"]
    assert results["rows"] == account_of(summary)
    report = (tmp_path / "dirty" / "report.md").read_text()
    assert f"1 of {len(rows['id'])} rows left out of every group (1 {reason})" in report and "\ufffd" not in report
    plain = cli(["constraints", "report", "-i", dirty_rows, "-o", tmp_path / "again", *args[:-1]])
    assert f"  left out: 1 of {len(rows['id'])} rows left out of every group (1 {reason}); " \
           f"{len(rows['id']) - 1} used; first {reason}: {where}" in plain.stdout.splitlines()


def test_constraints_report_chains_both_accounts_and_names_rows_by_their_place_in_the_file(tmp_path, cli):
    """A system not valid UTF-8 (row 2) and a missing system (row 5): both counted in one account,
    the missing one named at its row of the file, not of the rows kept."""
    rows, scores = codi_rows()
    rows["system"][5] = None
    dirty_rows = write_codi(tmp_path / "dirty.parquet", rows, {"system": (2,)})
    score_file = write_codi(tmp_path / "scores.parquet", scores)
    got = cli(["constraints", "report", "-i", dirty_rows, "-o", tmp_path / "out", "--scores", score_file,
               "--no-self-bleu", "--json"])
    assert got.returncode == 0, got.stderr
    summary = json.loads(got.stdout)
    n = len(rows["id"])
    assert summary["rows_left_out"] == {"system key not valid UTF-8": 1, "no system": 1}
    assert (summary["rows_in"], summary["rows_used"]) == (n, n - 2)
    assert summary["rows_left_out_first"]["no system"].startswith(f"{dirty_rows}: column 'system', row 5 ")
    assert json.loads((tmp_path / "out" / "results.json").read_text())["rows"] == account_of(summary)


def test_constraints_report_ignores_columns_it_does_not_read_and_still_refuses_bad_text(tmp_path, cli):
    rows, scores = codi_rows()
    rows["references"] = ["x"] * len(rows["id"])  # a column the report never reads
    score_file = write_codi(tmp_path / "scores.parquet", {**scores, "system": rows["system"]}, {"system": (2,)})
    extra = write_codi(tmp_path / "extra.parquet", rows, {"references": (3,)})
    got = cli(["constraints", "report", "-i", extra, "--scores", score_file, "-o", tmp_path / "r", "--no-self-bleu"])
    assert got.returncode == 0, got.stderr  # neither the unread column nor the scores' carried system matters
    text = write_codi(tmp_path / "text.parquet", rows, {"text": (3,)})  # data, not a key: still refused, named
    refused = cli(["constraints", "report", "-i", text, "--scores", score_file, "-o", tmp_path / "t"])
    assert refused.returncode == 1 and f"input {text}: row 3: column 'text' is not valid UTF-8" in refused.stderr


# ----- splits --corpus ---------------------------------------------------------------------------
ASPECTS = {"sentiment": ["Positive", "Negative"], "pronoun": ["plural", "singular"], "tense": ["Present", "Past"]}


def corpus_columns(per_combo=4):
    """Every combination of ASPECTS `per_combo` times, predictions right but for Negative tense."""
    import itertools

    cols = {"id": [], "text": [], "perplexity": [], **{f"pred_{a}": [] for a in ASPECTS}, **{a: [] for a in ASPECTS}}
    for i, combo in enumerate(itertools.product(*ASPECTS.values())):
        d = dict(zip(ASPECTS, combo))
        for r in range(per_combo):
            cols["id"].append(f"c{i}r{r}")
            cols["text"].append(f"w{r} w{r} x y z {'a b' * (i % 3)}")
            cols["perplexity"].append(float(10 + i + r))
            for a in ASPECTS:
                cols[a].append(d[a])
                cols[f"pred_{a}"].append(d[a] if a != "tense" or d["sentiment"] == "Positive" else "Past")
    return cols


def write_corpus(path, cols, layout, bad: dict[str, tuple] = ()):
    """`cols` as a corpus: one column per aspect, or an `attributes` map whose value (or, for
    `bad` key "<aspect>:name", aspect name) in the `bad` rows holds BAD."""
    bad = dict(bad)
    arrays = {name: (text_column(values, bad[name]) if name in bad and layout == "columns" or name in bad and name not in ASPECTS
                     else pa.array(values))
              for name, values in cols.items() if layout == "columns" or name not in ASPECTS}
    if layout == "map":
        names, values = [], []
        for r in range(len(cols["id"])):
            for a in ASPECTS:
                names.append(BAD if r in bad.get(f"{a}:name", ()) else a.encode())
                values.append(BAD if r in bad.get(a, ()) else cols[a][r].encode())
        offsets = pa.array(range(0, len(names) + 1, len(ASPECTS)), pa.int32())
        arrays["attributes"] = pa.MapArray.from_arrays(offsets, pa.array(names, pa.binary()).view(pa.string()),
                                                       pa.array(values, pa.binary()).view(pa.string()))
    pq.write_table(pa.table(arrays), path)
    return str(path)


@pytest.mark.parametrize("layout,key", [("columns", "tense"), ("map", "tense"), ("map", "tense:name")])
def test_splits_of_a_corpus_leave_the_bad_row_out_of_splits_partitions_and_report(tmp_path, cli, layout, key):
    cols = corpus_columns()
    bad_row = 6
    dirty = write_corpus(tmp_path / "dirty.parquet", cols, layout, {key: (bad_row,)})
    clean = write_corpus(tmp_path / "clean.parquet", without(cols, [bad_row]), layout)
    column = "attributes" if layout == "map" else key
    reason, where = f"{column} key not valid UTF-8", f"{dirty}: column '{column}', row {bad_row}"
    for name, corpus in (("dirty", dirty), ("clean", clean)):
        got = cli(["splits", "--corpus", corpus, "--protocol", "holdout", "-o", tmp_path / f"{name}.json",
                   "--partition-dir", tmp_path / f"{name}-parts", "--report", "--json"])
        assert got.returncode == 0, got.stderr
        if name == "dirty":
            summary = json.loads(got.stdout)
    n = len(cols["id"])
    account = {"rows_in": n, "rows_used": n - 1, "rows_left_out": {reason: 1}, "rows_left_out_first": {reason: where}}
    assert account_of(summary) == account
    splits = [json.loads((tmp_path / f"{name}.json").read_text()) for name in ("dirty", "clean")]
    assert splits[0]["splits"] == splits[1]["splits"]
    manifests = [json.loads((tmp_path / f"{name}-parts" / "manifest.json").read_text()) for name in ("dirty", "clean")]
    assert manifests[0]["rows"] == account and [s["rows"] for s in manifests[0]["splits"]] == \
        [s["rows"] for s in manifests[1]["splits"]]
    for folder in manifests[0]["splits"]:  # the same rows, the bad one in none of the parts
        for part in ("train", "test_iid", "test_comp"):
            got, want = (pq.read_table(tmp_path / f"{name}-parts" / folder["folder"] / f"{part}.parquet")
                         for name in ("dirty", "clean"))
            assert got.column("id").to_pylist() == want.column("id").to_pylist()
    reports = [json.loads((tmp_path / f"{name}.report.json").read_text()) for name in ("dirty", "clean")]
    assert reports[0]["summary"] == reports[1]["summary"] and reports[0]["splits"] == reports[1]["splits"]
    assert reports[0]["rows"] == account
    text = (tmp_path / "dirty.report.md").read_text()
    assert f"1 of {n} rows left out (1 {reason})" in text and "\ufffd" not in text
    plain = cli(["splits", "--corpus", dirty, "--protocol", "holdout", "-o", tmp_path / "again.json"])
    assert f"  left out: 1 of {n} rows left out of every group (1 {reason}); {n - 1} used; first {reason}: {where}" \
        in plain.stdout.splitlines()


def test_splits_data_columns_not_utf8_keep_their_rows(tmp_path, cli):
    """An id (it only seeds the i.d. test draw), a prediction (a wrong one) or a text (left out of
    Dist-3) that is not valid UTF-8 is data, not a key: its row stays in its split."""
    cols = corpus_columns()
    dirty = write_corpus(tmp_path / "dirty.parquet", cols, "columns", {"id": (3,), "pred_sentiment": (5,), "text": (7,)})
    got = cli(["splits", "--corpus", dirty, "--protocol", "holdout", "-o", tmp_path / "s.json",
               "--partition-dir", tmp_path / "parts", "--report", "--json"])
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["rows_left_out"] == {}
    manifest = json.loads((tmp_path / "parts" / "manifest.json").read_text())
    assert all(sum(s["rows"].values()) == len(cols["id"]) for s in manifest["splits"])
    report = json.loads((tmp_path / "s.report.json").read_text())
    assert report["values_not_utf8"] == {"pred_sentiment": 1, "text": 1}


# ----- key columns stored as Parquet binary; load_scores -------------------------------------------
def score_columns(n_docs=6, systems=("s0", "s1", "s2")):
    import numpy as np

    rng = np.random.default_rng(5)
    rows = [(doc, k) for doc in range(n_docs) for k in range(len(systems))]
    return {"id": [f"r{doc}-{k}" for doc, k in rows], "dataset": ["a" if doc % 2 else "b" for doc, _ in rows],
            "system": [systems[k] for _, k in rows], "doc_id": [f"doc{doc}" for doc, _ in rows],
            "m": [float(rng.normal(k)) for _, k in rows], "human_q": [float(rng.normal(k)) for _, k in rows]}


def write_scores(path, cols, key=None, bad_rows=(), kind="string"):
    arrays = {name: text_column(values, bad_rows if name == key else (), kind if name == key else "string")
              if name in ("id", "dataset", "system", "doc_id") else pa.array(values) for name, values in cols.items()}
    pq.write_table(pa.table(arrays), path)
    return str(path)


@pytest.mark.parametrize("key", ["system", "dataset", "doc_id"])
def test_a_binary_key_column_is_read_as_its_text_and_its_other_bytes_left_out(tmp_path, cli, key):
    """Parquet `binary` keys (text stored without the UTF-8 annotation): `meta` and `compare`
    give the numbers of the same data stored as strings without the bad row; before, `meta`
    failed with an internal error and `compare` named the groups b'a', b'\\xff\\xfe'."""
    cols = score_columns()
    bad_row = 4
    dirty = write_scores(tmp_path / "dirty.parquet", cols, key, (bad_row,), "binary")
    clean = write_scores(tmp_path / "clean.parquet", without(cols, [bad_row]))
    reason = f"{key} key not valid UTF-8"
    args = ["--columns", "m", "--resamples", "20", "--trials", "20", "--json"]
    got = cli(["compare", "-s", dirty, *args])
    assert got.returncode == 0, got.stderr
    summary, want = json.loads(got.stdout), json.loads(cli(["compare", "-s", clean, *args]).stdout)
    assert summary["rows_left_out"] == {reason: 1}
    assert summary["rows_left_out_first"] == {reason: f"{dirty}: column '{key}', row {bad_row}"}
    assert summary["comparisons"] == want["comparisons"] and summary["leaderboard"] == want["leaderboard"]
    meta = ["--metrics", "m", "--human-columns", "human_q", "--resamples", "10", "--trials", "10",
            "--methods", "spearman", "--no-progress", "--json"]
    got = cli(["meta", "-s", dirty, "-o", tmp_path / "dirty", *meta])
    assert got.returncode == 0, got.stderr
    assert cli(["meta", "-s", clean, "-o", tmp_path / "clean", *meta]).returncode == 0
    assert json.loads(got.stdout)["rows_left_out"] == {reason: 1}
    results, reference = (json.loads((tmp_path / name / "results.json").read_text()) for name in ("dirty", "clean"))
    assert results["groups"] == reference["groups"]


@pytest.mark.parametrize("kind", ["string", "binary"])
@pytest.mark.parametrize("key", ["system", "dataset", "doc_id", "id"])
def test_load_scores_keeps_every_row_and_gives_a_key_not_utf8_as_its_bytes(tmp_path, key, kind):
    """`load_scores` returns every row (it leaves nothing out); a key that is not valid UTF-8
    comes back as the bytes stored (never decoded with replacement characters, so it equals no
    other key), every other key as its text; a binary key column reads as text. Before, reading
    such a value of the frame raised an ArrowException ("Wrapping ... failed")."""
    import ctgscore

    cols = score_columns()
    path = write_scores(tmp_path / "s.parquet", cols, key, (4,), kind)
    frame = ctgscore.load_scores(path)
    assert len(frame) == len(cols["id"])
    got = dict(zip(frame["id"].tolist(), frame[key].tolist()))
    bad_id = BAD if key == "id" else cols["id"][4]
    want = {row_id: value for row_id, value in zip(cols["id"], cols[key])}
    want[bad_id] = BAD
    if key == "id":
        del want[cols["id"][4]]
    assert got == want and all(type(v) is str for k, v in got.items() if k != bad_id)
    assert frame["m"].tolist() == [m for _, m in sorted(zip(cols["id"], cols["m"]), key=lambda p: (p[0] == cols["id"][4] and key == "id", p[0]))]


def test_unreadable_mask_of_a_map_column_names_the_rows_with_a_bad_name_or_value():
    from scoring.utf8_text import unreadable_mask

    names = pa.array([b"a", b"b", BAD, b"a", b"b", b"a"], pa.binary()).view(pa.string())
    values = pa.array([b"x", b"y", b"z", b"x", BAD, b"x"], pa.binary()).view(pa.string())
    maps = pa.MapArray.from_arrays(pa.array([0, 2, 3, 3, 5, 6], pa.int32()), names, values)  # rows: ok, bad name, empty, bad value, ok
    assert unreadable_mask(maps).tolist() == [False, True, False, True, False]
    assert unreadable_mask(maps.slice(2)).tolist() == [False, True, False]  # offsets into the unsliced entries
    assert unreadable_mask(maps.slice(4)) is None


# ----- compmctg ------------------------------------------------------------------------------------
COMBOS = [("Positive", "Present"), ("Positive", "Past"), ("Negative", "Present"), ("Negative", "Past")]


def compmctg_files(tmp_path, name, bad: dict[str, int] = (), drop=(), kind="string"):
    """Scores (dataset toy, per-aspect accuracies) and a dump (id, attributes map) of 16 rows,
    the rows in `drop` left out; `bad`: "scores:<column>" or "dump:id" / "dump:attributes" -> a row holding BAD."""
    bad = dict(bad)
    rows = [i for i in range(16) if i not in set(drop)]
    ids = [f"r{i}" for i in rows]

    def column(side, key, values):
        row = bad.get(f"{side}:{key}")
        return text_column(values, () if row is None else (rows.index(row),), kind if row is not None else "string")

    scores = pa.table({"id": column("scores", "id", ids), "dataset": column("scores", "dataset", ["toy"] * len(rows)),
                       "system": pa.array(["s"] * len(rows)),
                       "attribute_accuracy_sentiment": [float(i % 3 != 0) for i in rows],
                       "attribute_accuracy_tense": [float(i % 2) for i in rows],
                       "attribute_accuracy": [(float(i % 3 != 0) + float(i % 2)) / 2 for i in rows]})
    names, values = [], []
    for i in rows:
        names += [b"sentiment", b"tense"]
        values += [BAD if bad.get("dump:attributes") == i and a == 0 else COMBOS[i % 4][a].encode() for a in (0, 1)]
    dump = pa.table({"id": column("dump", "id", ids), "attributes": pa.MapArray.from_arrays(
        pa.array(range(0, 2 * len(rows) + 1, 2), pa.int32()), pa.array(names, pa.binary()).view(pa.string()),
        pa.array(values, pa.binary()).view(pa.string()))})
    folder = tmp_path / name
    folder.mkdir()
    pq.write_table(scores, folder / "scores.parquet")
    pq.write_table(dump, folder / "dump.parquet")
    split = {"signature": {"protocol": "holdout"}, "aspects": {"sentiment": ["Positive", "Negative"], "tense": ["Present", "Past"]},
             "splits": [{"seen": [dict(zip(("sentiment", "tense"), c)) for c in COMBOS[:3]],
                         "unseen": [dict(zip(("sentiment", "tense"), c)) for c in COMBOS[3:]], "divergence": 0.5}]}
    (folder / "split.json").write_text(json.dumps(split))
    return folder


@pytest.mark.parametrize("where,reason,kind", [
    ("scores:dataset", "dataset key not valid UTF-8", "string"), ("scores:dataset", "dataset key not valid UTF-8", "binary"),
    ("scores:id", "id key not valid UTF-8", "string"), ("scores:id", "id key not valid UTF-8", "binary"),
    ("dump:attributes", "attributes key not valid UTF-8", "string")])
def test_compmctg_leaves_the_bad_row_out_and_tabulates_the_others_alike(tmp_path, cli, where, reason, kind):
    bad_row = 5
    dirty = compmctg_files(tmp_path, "dirty", {where: bad_row}, kind=kind)
    clean = compmctg_files(tmp_path, "clean", drop=(bad_row,))
    if where == "scores:id":  # the dump's row of that id is as bad: it names no score
        dirty = compmctg_files(tmp_path, "dirty2", {where: bad_row, "dump:id": bad_row}, kind=kind)
    for folder in (dirty, clean):
        got = cli(["compmctg", "--dump", folder / "dump.parquet", "--scores", folder / "scores.parquet",
                   "--splits", f"toy={folder / 'split.json'}", "-o", folder / "table.json", "--json"])
        assert got.returncode == 0, got.stderr
        if folder == dirty:
            summary = json.loads(got.stdout)
    got, want = (json.loads((folder / "table.json").read_text()) for folder in (dirty, clean))
    assert got["datasets"] == want["datasets"]
    assert got["rows"]["rows_left_out"] == {reason: 1} and (got["rows"]["rows_in"], got["rows"]["rows_used"]) == (16, 15)
    assert account_of(summary) == got["rows"]
    side = "dump" if where.startswith("dump") else "scores"
    assert next(iter(got["rows"]["rows_left_out_first"].values())).startswith(str(dirty / f"{side}.parquet"))
    assert f"1 of 16 rows left out of every group (1 {reason})" in (dirty / "table.md").read_text()


# ----- plot titles and labels: names cut past the point where a label is cut --------------------
def test_plot_titles_of_names_that_differ_only_past_the_cut_never_read_alike(tmp_path, cli, monkeypatch):
    """Two datasets, two human aspects and two metric columns whose names differ only after 110
    characters, and two systems `sys<newline>A` / `sys\\nA` typed: every plot's title and axis
    label tells them apart (the cut form carries the name's length and digest,
    `scoring.display_names`), as the report's headings and file names do. Before, a title cut
    a name at 80 characters with only "…", so the plots of the two datasets read alike."""
    import itertools

    import numpy as np

    from meta_eval.report import files
    from scoring.display_names import digest

    drawn = []  # (file, title and labels of every axes)

    def record(fig, path, dpi):
        texts = []
        for ax in fig.axes:
            texts += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel(), *(t.get_text() for t in ax.get_yticklabels())]
        drawn.append((pathlib.Path(path), texts))
        return pathlib.Path(path)

    import pathlib

    monkeypatch.setattr(files, "write_figure", record)
    long = "d" * 110
    datasets, humans, metrics = [long + "-one", long + "-two"], ["human_" + long + "1", "human_" + long + "2"], \
        [long + "m1", long + "m2"]
    rng = np.random.default_rng(2)
    rows = [(d, doc, s) for d in datasets for doc in range(8) for s in ("s0", "s1", "s2")]
    data = {"id": [f"{k}" for k in range(len(rows))], "dataset": [d for d, _, _ in rows],
            "system": [s for _, _, s in rows], "doc_id": [f"doc{doc}" for _, doc, _ in rows]}
    for column in humans + metrics:
        data[column] = [float(rng.normal(int(s[1]))) for _, _, s in rows]
    path = tmp_path / "s.parquet"
    pq.write_table(pa.table(data), path)
    got = cli(["meta", "-s", path, "-o", tmp_path / "r", "--metrics", *metrics, "--human-columns", *humans,
               "--resamples", "10", "--trials", "10", "--methods", "spearman", "--no-progress"])
    assert got.returncode == 0, got.stderr
    titles = {(p.parent.name, p.name): texts[0] for p, texts in drawn}
    folders = sorted({folder for folder, _ in titles})
    assert len(folders) == 2
    pairs = [(titles[(folders[0], name)], titles[(folders[1], name)]) for f, name in titles if f == folders[0]]
    assert pairs and all(a != b for a, b in pairs)  # the same plot of the two datasets
    for name in datasets:
        assert any(digest(name) in title for title in titles.values())
    within = [texts[0] for p, texts in drawn if p.name.startswith("significance_") and p.parent.name == folders[0]]
    assert len(within) == len(set(within)) >= 2  # the two human aspects' plots
    alike = ["sys\nA", "sys\\nA"]
    from meta_eval.report import plots

    assert plots.plain(alike[0]) != plots.plain(alike[1])
    assert all(plots.plain(a) != plots.plain(b) for a, b in itertools.combinations(datasets + humans + metrics, 2))
    assert all(len(plots.plain(n)) <= plots.LABEL_MAX for n in datasets + ["W" * 200_000])


# ----- a folder of shards: the first row named in its own shard ----------------------------------
def test_constraints_report_of_a_folder_names_the_shard_and_its_row(tmp_path, cli):
    """A folder input whose second shard holds a system not valid UTF-8 (its row 1) and a missing
    system (its row 3): both named in that shard, not as rows of the shards joined."""
    rows, scores = codi_rows()
    n = len(rows["id"])
    half = n // 2
    rows["system"][half + 3] = None
    folder = tmp_path / "in"
    folder.mkdir()
    write_codi(folder / "a.parquet", {k: v[:half] for k, v in rows.items()})
    second = write_codi(folder / "b.parquet", {k: v[half:] for k, v in rows.items()}, {"system": (1,)})
    score_file = write_codi(tmp_path / "scores.parquet", scores)
    got = cli(["constraints", "report", "-i", folder, "-o", tmp_path / "out", "--scores", score_file,
               "--no-self-bleu", "--json"])
    assert got.returncode == 0, got.stderr
    first = json.loads(got.stdout)["rows_left_out_first"]
    assert first["system key not valid UTF-8"] == f"{second}: column 'system', row 1"
    assert first["no system"].startswith(f"{second}: column 'system', row 3 ")


def test_splits_of_a_folder_corpus_name_the_shard_and_its_row(tmp_path, cli):
    cols = corpus_columns()
    half = len(cols["id"]) // 2
    folder = tmp_path / "corpus"
    folder.mkdir()
    write_corpus(folder / "a.parquet", {k: v[:half] for k, v in cols.items()}, "columns")
    second = write_corpus(folder / "b.parquet", {k: v[half:] for k, v in cols.items()}, "columns", {"tense": (2,)})
    got = cli(["splits", "--corpus", folder, "--protocol", "holdout", "-o", tmp_path / "s.json", "--json"])
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout)["rows_left_out_first"] == {"tense key not valid UTF-8": f"{second}: column 'tense', row 2"}
