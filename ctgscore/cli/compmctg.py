"""`ctgscore compmctg`: the CompMCTG results table (meta_eval/compmctg.py) from splits files and
stored scores whose rows carry their attribute combination.

    ctgscore compmctg --dump dump/ --scores out/ --splits Fyelp=fyelp_holdout.json --splits Fyelp=fyelp_acd.json -o table.json
"""

from __future__ import annotations

import argparse
import json

from ctgscore.cli import common
from scoring import atomic_files
from scoring.errors import UsageError


def register(subparsers, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "compmctg", parents=[parent], help="CompMCTG results table (A_i, A_c, gap, perplexity) from splits and scores",
        description="Per dataset, protocol and split: attribute accuracy on the in-distribution and compositional "
                    "test combinations, the compositional gap and perplexity, with the paper's averages (Few-Shot "
                    "apart). Writes OUTPUT (JSON) and OUTPUT with .md.",
    )
    parser.add_argument("--dump", required=True, help="the generation dump (file, folder or s3:// prefix) with `attributes`")
    parser.add_argument("--scores", required=True, help="scores with attribute_accuracy_<aspect> (and perplexity) columns")
    parser.add_argument("--splits", action="append", required=True, metavar="DATASET=FILE",
                        help="a `ctgscore splits` JSON for the rows of DATASET (repeat per dataset and protocol)")
    parser.add_argument("-o", "--output", required=True, help="output JSON file")
    parser.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:

    from ctgscore.scores import load_scores_placed
    from meta_eval.compmctg import check_splits_json, markdown_section, results_table, scored_rows, splits_aspects
    from meta_eval.row_account import RowAccount
    from scoring.errors import InputError
    from scoring.json_files import read_json
    from scoring.local_files import refuse_device

    output = common.check_output_file(args.output)
    common.check_input_path(args.dump, "dump")
    splits = []
    for pair in args.splits:  # a dataset may come with several protocols: not a dict
        dataset, path = next(iter(common.parse_assignments([pair], "--splits").items()))
        refuse_device(path, f"--splits {dataset}=", InputError)
        try:
            data = read_json(path)
            check_splits_json(data)
            splits.append((dataset, data))
        except RecursionError:
            raise InputError(f"--splits {dataset}={path}: cannot read it as a splits JSON (nested too deep)") from None
        except (OSError, ValueError) as exc:
            raise InputError(f"--splits {dataset}={path}: cannot read it as a splits JSON ({exc})") from None
    scores, row_files = load_scores_placed(args.scores)  # where each score row was stored names a row left out
    frame, rows = scored_rows(args.dump, scores, source=str(args.scores), aspects=splits_aspects(splits),
                              row_files=row_files)
    if "dataset" in frame:  # a dataset the scores do not have would make a table of dashes
        from scoring.display_names import quoted, quoted_list

        present = sorted({str(d) for d in frame["dataset"].dropna()})
        for dataset, _ in splits:
            if dataset not in present:
                raise UsageError(f"--splits {quoted(dataset)}=...: scores {args.scores} have no rows of dataset "
                                 f"{quoted(dataset)} (datasets: {quoted_list(present)})")
    try:
        table = results_table(frame, splits, source=str(args.scores), earlier=rows)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    from meta_eval.results import to_json_dict

    # undefined numbers as null: NaN and Infinity are not JSON
    atomic_files.write_text(output, json.dumps(to_json_dict(table), indent=1, default=str, allow_nan=False) + "\n")
    markdown = output.with_suffix(".md")
    atomic_files.write_text(markdown, markdown_section(table))

    account = table["rows"]  # every scored row: used, or left out with its reason (docs/meta_eval.md, "Rows left out")
    summary = {"ok": True, "command": "compmctg", "output": str(output), "markdown": str(markdown),
               "datasets": {name: data["average"] for name, data in table["datasets"].items()}, **account}
    lines = [f"compmctg: {len(splits)} splits file(s), {len(table['datasets'])} dataset(s) -> {output}, {markdown}"]
    lines += RowAccount.lines(account["rows_used"], account["rows_left_out"], first=account.get("rows_left_out_first"))
    common.emit(args, summary, lines)
    return 0
