"""Claims of docs/security.md that no other test held: each test here fails when its claim breaks.

The doc's numbers and names (caps, limits, modules and functions it cites) are checked against
the code, so a constant changed or a module renamed without the doc fails here. The other tests
run the real commands in this process (`run_cli_in_process`): look-alike letters in a report,
`s3://` credentials given to `meta` and `compmctg`, symlinks planted at every output a command
writes, the inflation floor, JSON side files past the reader, and Ray's token left on.
"""

from __future__ import annotations

import ast
import json
import pathlib
import re
import sys

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ctgscore.testing.cli import assert_user_error, run_cli_in_process

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOC = (ROOT / "docs" / "security.md").read_text(encoding="utf-8")
SECRET = "wJalrXUtnFEMIK7MDENGbPxRfiCYzEXAMPLEKEY"


# ----- the doc's numbers and names are the code's -----------------------------------------------
def _literal(relative: str, name: str):
    """A module's top-level constant, read from its source (`scoring.ctrleval` imports torch)."""
    for node in ast.parse((ROOT / relative).read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == name for t in node.targets):
            return ast.literal_eval(node.value)
    raise AssertionError(f"{relative}: no constant {name}")


def _numbers():
    from ctgscore.cli.common import REASON_LIMIT
    from ctgscore.convert.readers import MAX_RECORD_BYTES
    from ctgscore.convert.report import MAX_REASONS
    from ctgscore.convert.rows import MAX_RATING_COLUMNS
    from scoring import config_yaml, limits
    from scoring.console_text import LINE_LIMIT
    from scoring.display_names import DIGEST_HEX, DISPLAY_MAX
    from scoring.text_encoding import HEAD_CHARS_PER_TOKEN, HEAD_MARGIN
    from splits.aspects import MAX_COMBINATIONS

    return [  # (the code's value, what the doc says it is)
        (f"{limits.MAX_CELL_BYTES:,}", r"`max_cell_bytes` \(([\d,]+) UTF-8 bytes"),
        (f"{limits.MAX_REFERENCES:,}", r"`max_references` \(([\d,]+) items"),
        (f"{limits.MAX_JSON_DEPTH}", r"`max_json_depth` \((\d+),"),
        (f"{limits.MAX_INFLATION:g}", r"`max_inflation` \((\d+)\)"),
        (f"{limits.INFLATION_FLOOR_BYTES >> 20}", r"and\s+over (\d+) MiB"),
        (f"{config_yaml.MAX_DEPTH}", r"nesting past (\d+) refused"),
        (f"{DISPLAY_MAX}", r"a name longer than (\d+)\s+characters is shown cut"),
        (f"{DIGEST_HEX * 4}", r"a (\d+)-bit SHA-256 digest"),
        (f"{LINE_LIMIT:,}", r"A line longer than ([\d,]+)\s+characters"),
        (f"{REASON_LIMIT}", r"a row-error reason\s+in a summary is cut at (\d+)"),
        (f"{HEAD_MARGIN}", r"\(`max_length` \+ (\d+)\)"),
        (f"{HEAD_CHARS_PER_TOKEN}", r"\(`max_length` \+ \d+\) × (\d+) characters"),
        (f"{_literal('scoring/ctrleval.py', 'MAX_SENTENCES')}", r"refuses a text of more than (\d+) sentences"),
        (f"{MAX_RECORD_BYTES:,}", r"record cap \(([\d,]+) bytes, `--max-record-bytes`"),
        (f"{MAX_REASONS}", r"names at most (\d+) distinct drop reasons"),
        (f"{MAX_RATING_COLUMNS:,}", r"more than ([\d,]+)\s+distinct `human_<aspect>` fields"),
        (f"{MAX_COMBINATIONS:,}", r"refuses more than ([\d,]+) combinations"),
        (f"{sys.get_int_max_str_digits():,}", r"an integer of more than ([\d,]+)\s+digits"),
    ]


def test_the_docs_numbers_are_the_codes_constants():
    for value, pattern in _numbers():
        found = re.findall(pattern, DOC)
        assert found == [value], (pattern, found, value)


def _top_level_names(path: pathlib.Path) -> set[str]:
    names = set()
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
            if isinstance(node, ast.ClassDef):
                names |= {f"{node.name}.{item.name}" for item in node.body
                          if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef))}
        elif isinstance(node, ast.Assign):
            names |= {target.id for target in node.targets if isinstance(target, ast.Name)}
    return names


def test_every_module_function_and_file_the_doc_cites_exists():
    """`scoring.x`, `scoring.x.f`, `RowMetric.check_row`, `ray_jobs/config.py`, the tests it
    names: each is there (read from the source, nothing imported)."""
    cited = set(re.findall(r"`((?:scoring|meta_eval|splits|ray_jobs|ctgscore)(?:\.\w+)+)`", DOC))
    assert {"scoring.config_yaml", "scoring.redact.redact_url", "scoring.atomic_files"} <= cited
    group = "ctgscore.metrics"  # the plugins' entry point group, not a module
    assert group in cited and f'ENTRY_POINT_GROUP = "{group}"' in (ROOT / "scoring" / "registry.py").read_text()
    cited.discard(group)
    for dotted in sorted(cited):
        parts = dotted.split(".")
        for cut in range(len(parts), 0, -1):  # the longest prefix that is a module, the rest names in it
            module = ROOT.joinpath(*parts[:cut])
            path = module.with_suffix(".py") if module.with_suffix(".py").is_file() else module / "__init__.py"
            if path.is_file():
                break
        else:
            raise AssertionError(f"{dotted}: no such module")
        rest = ".".join(parts[cut:])
        assert not rest or rest in _top_level_names(path), dotted
    methods = set(re.findall(r"`(RowMetric\.\w+)`", DOC))
    assert methods == {"RowMetric.check_row", "RowMetric.check_types"}
    assert methods <= _top_level_names(ROOT / "scoring" / "metric.py")
    files = set(re.findall(r"`((?:scoring|ray_jobs|deploy|tests)/[\w./-]+\.(?:py|yaml))`", DOC))
    files |= set(re.findall(r"(tests/test_\w+\.py)", DOC))
    assert len(files) > 10
    assert [name for name in sorted(files) if not (ROOT / name).is_file()] == []


# ----- reports: look-alike letters and a no-break space are shown as they are -------------------
LOOK_ALIKE = ["abc", "\u0430bc", "sys A", "sys\u00a0A"]  # Latin and Cyrillic a; a space and a no-break space


def test_reports_show_look_alike_letters_and_a_no_break_space_as_they_are(tmp_path):
    rng = np.random.default_rng(0)
    rows = [{"id": f"r{i}-{k}", "dataset": "d", "system": system, "doc_id": f"doc{i}", "m": float(rng.random()),
             "error": None} for k, system in enumerate(LOOK_ALIKE) for i in range(6)]
    pd.DataFrame(rows).to_parquet(tmp_path / "s.parquet", index=False)
    for name in ("board.md", "board.html"):
        proc = run_cli_in_process(["compare", "-s", tmp_path / "s.parquet", "-o", tmp_path / name,
                                   "--resamples", "20", "--trials", "20"])
        assert proc.returncode == 0, proc.stderr
        text = (tmp_path / name).read_text(encoding="utf-8")
        for system in LOOK_ALIKE:  # each its own row, in its own characters (no &nbsp;, no escape)
            assert re.search(rf"(^|[|>,\s]){re.escape(system)}([|<,\s]|$)", text, re.M), (name, system)
        assert "&nbsp;" not in text and "\\u0430" not in text and "\\xa0" not in text


# ----- credentials in an s3:// path: refused before any request, never printed -----------------
def _compmctg(tmp_path, dump=None, scores=None):
    from tests.test_report_hostile_more import compmctg_inputs

    args = compmctg_inputs(tmp_path)
    if dump is not None:
        args[args.index("--dump") + 1] = dump
    if scores is not None:
        args[args.index("--scores") + 1] = scores
    return args + ["--splits", f"toy={tmp_path / 'split.json'}"]


@pytest.mark.parametrize("command", ["meta", "compmctg --dump", "compmctg --scores", "constraints -i",
                                     "constraints --scores"])
def test_meta_compmctg_and_constraints_report_refuse_an_s3_path_with_credentials(tmp_path, command, monkeypatch):
    """`constraints report` read with pyarrow, which signed its requests with the URL's keys."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # a request that slipped through fails fast
    url = f"s3://AKIAEXAMPLE:{SECRET}@mybucket/scores/"
    if command == "meta":
        args = ["meta", "-s", url, "-o", tmp_path / "meta"]
    elif command.startswith("constraints"):
        local = tmp_path / "rows.parquet"
        pq.write_table(pa.table({"id": ["r0"], "codi_success": [1.0]}), local)
        args = ["constraints", "report", "-i", local, "--scores", local, "-o", tmp_path / "report"]
        args[args.index(command.split()[1]) + 1] = url
    else:
        args = _compmctg(tmp_path, **{command.split("--")[1]: url})
    proc = run_cli_in_process(args)
    line = assert_user_error(proc, 2, "s3://***@mybucket/scores/", "cannot carry credentials")
    assert SECRET not in proc.stdout + proc.stderr, line


# ----- every output a command writes replaces a planted symlink -------------------------------
def test_every_output_of_convert_score_compmctg_and_splits_replaces_a_symlink(tmp_path):
    from tests.test_keys_not_utf8_more import corpus_columns, write_corpus

    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    outside = tmp_path / "outside"
    outside.mkdir()

    def planted(*paths):
        for path in paths:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.symlink_to(victim)
        return paths

    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"id": f"r{i}", "text": "a b c"}) + "\n" for i in range(3)))
    converted, report = planted(tmp_path / "c.parquet", tmp_path / "c.report.json")
    runs = [(["convert", "-i", rows, "-o", converted, "--report", report], [converted, report])]
    (scored,) = planted(tmp_path / "s.parquet")
    runs.append((["score", "-m", "text_stats", "-i", converted, "-o", scored], [scored]))
    folder = tmp_path / "cm"
    folder.mkdir()
    runs.append((_compmctg(folder), planted(folder / "table.json", folder / "table.md")))
    corpus = write_corpus(tmp_path / "corpus.parquet", corpus_columns(), "columns")
    parts = tmp_path / "parts"
    links = planted(tmp_path / "sp.json", tmp_path / "sp.report.json", tmp_path / "sp.report.md",
                    parts / "manifest.json", parts / "holdout_00" / "train.parquet")
    (parts / "holdout_01").symlink_to(outside, target_is_directory=True)
    runs.append((["splits", "--corpus", corpus, "--protocol", "holdout", "-o", tmp_path / "sp.json",
                  "--partition-dir", parts, "--report"], [*links, parts / "holdout_01"]))
    for args, outputs in runs:
        proc = run_cli_in_process(args)
        assert proc.returncode == 0, (args[0], proc.stderr)
        for path in outputs:
            assert path.exists() and not path.is_symlink(), (args[0], path)
    assert victim.read_text() == "keep me" and list(outside.iterdir()) == []
    assert pq.read_table(scored).num_rows == 3 and json.loads((folder / "table.json").read_text())


# ----- the inflation cap spares files that declare less than its floor -------------------------
def _zeros(path: pathlib.Path, rows: int) -> pathlib.Path:
    pq.write_table(pa.table({"x": np.zeros(rows, dtype=np.int64)}), path, compression="zstd", use_dictionary=False)
    return path


def test_inflation_is_refused_only_past_the_floor():
    from scoring import limits

    assert limits.INFLATION_FLOOR_BYTES == 16 * 1024 * 1024 and limits.MAX_INFLATION == 100


@pytest.mark.parametrize("rows, refused", [(1_900_000, False), (2_300_000, True)])
def test_a_file_declaring_less_than_16_mib_is_never_refused_however_it_compresses(tmp_path, rows, refused):
    from scoring import limits

    path = _zeros(tmp_path / "zeros.parquet", rows)
    size, metadata = path.stat().st_size, pq.ParquetFile(path).metadata
    declared = limits.declared_size(metadata)
    assert declared > 1000 * size  # far past max_inflation either way
    assert (declared > 16 * 1024 * 1024) is refused
    problem = limits.inflation_problem(metadata, size)
    assert (problem is not None) is refused
    if refused:
        assert f"declares {declared} uncompressed bytes in a file of {size} bytes" in problem


# ----- JSON side files: past the reader, not JSON, not UTF-8: one line naming where -------------
@pytest.fixture
def side_files(tmp_path):
    rng = np.random.default_rng(0)
    rows = [{"id": f"r{i}{s}", "dataset": "toy", "system": s, "doc_id": f"d{i}", "m": float(rng.random()),
             "error": None} for s in "AB" for i in range(6)]
    pd.DataFrame(rows).to_parquet(tmp_path / "s.parquet", index=False)
    (tmp_path / "cm").mkdir()
    return tmp_path


def _read_side_file(root: pathlib.Path, reader: str, path: pathlib.Path) -> str:
    """The one line the reader gives for `path`."""
    from scoring.errors import UsageError

    if reader == "idf":
        from scoring.bertscore import BERTScorer

        with pytest.raises(UsageError) as refused:
            BERTScorer._load_idf(None, str(path))
        return str(refused.value)
    if reader == "templates":
        from scoring.prompted_lm import load_templates

        with pytest.raises(UsageError) as refused:
            load_templates(str(path))
        return str(refused.value).replace(f"templates: {path.name}:", f"templates: {path}:")  # it names the file
    if reader == "previous":
        args = ["compare", "-s", root / "s.parquet", "--columns", "m", "-o", root / "b.html", "--previous", path,
                "--resamples", "20"]
        return assert_user_error(run_cli_in_process(args), 2, f"--previous {path}")
    if reader == "compmctg":
        args = _compmctg(root / "cm")[:-1] + [f"toy={path}"]
        return assert_user_error(run_cli_in_process(args), 1, f"--splits toy={path}")
    args = ["splits", "--aspects", path, "--protocol", "holdout", "-o", root / "sp.json"]
    return assert_user_error(run_cli_in_process(args), 2, str(path))


READERS = ["previous", "compmctg", "idf", "aspects", "templates"]
BAD_JSON = {
    "digits": (b'{\n"x": [' + b"9" * 5000 + b"]\n}\n", "4300 digits"),
    "syntax": (b'{\n"x": 1,\n"y": ]\n}\n', "line 3 column 6"),
    "utf8": (b'{\n"x": 1,\n"y": "\xff"\n}\n', "not UTF-8 text (line 3, byte 16)"),
}


@pytest.mark.parametrize("bad", sorted(BAD_JSON))
@pytest.mark.parametrize("reader", READERS)
def test_a_json_side_file_that_cannot_be_read_is_one_line_naming_where(side_files, reader, bad):
    data, where = BAD_JSON[bad]
    path = side_files / f"{bad}.json"
    path.write_bytes(data)
    line = _read_side_file(side_files, reader, path)
    assert str(path) in line and where in line, line
    assert "Traceback" not in line and len(line) < 600


# ----- Ray's token: the tests switch it off, ctgscore's own code never does ---------------------
def _switches_auth_off(tree: ast.AST) -> list[int]:
    """Lines that hand Ray an auth mode of `disabled` (an assignment, a dict entry, a call)."""
    return [node.lineno for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.strip() == "disabled"]


def test_ctgscores_own_code_never_switches_rays_token_off():
    testing = ROOT / "ctgscore" / "testing"
    found = []
    for package in ("scoring", "meta_eval", "splits", "ray_jobs", "ctgscore"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if testing in path.parents:
                continue  # the test helpers do, as the doc says
            found += [f"{path.relative_to(ROOT)}:{line}" for line in _switches_auth_off(ast.parse(path.read_text()))]
    assert found == []
    shipped = [ROOT / "Makefile", ROOT / "cluster.yaml", *sorted((ROOT / "examples").rglob("*")),
               *sorted((ROOT / "deploy").rglob("*"))]
    text = "\n".join(p.read_text(errors="replace") for p in shipped if p.is_file())
    assert not re.search(r"RAY_AUTH_MODE\W{0,3}disabled", text)
    assert _switches_auth_off(ast.parse((testing / "cli.py").read_text()))  # the search finds the helpers' own
