"""The CompMCTG results table (Zhong et al. 2024, Table 1) from splits and stored scores.

Inputs: splits (`ctgscore splits` JSON, one per dataset and protocol) and a scored dump whose
rows carry their attribute combination (`attributes`) and the `attribute_accuracy_<aspect>`
columns of the `attribute_accuracy` metric (1 when the aspect's classifier predicts the gold
value), optionally `perplexity`. For one split, the rows whose combination is seen are the
in-distribution test set, those whose combination is unseen the compositional one:

    A_i = mean over aspects a of mean over seen rows of acc_a,  A_c likewise over unseen rows,
    G = (A_i - A_c) / A_i                                           (compositional gap)

and perplexity is the mean over each side's rows. A protocol's A_i, A_c and perplexity are the
means over its splits, its G is computed from those means. The averages follow the paper's
Table 1: A_avg = mean of Original A_i and the Hold-Out and ACD A_i and A_c; P_avg likewise over
perplexities; G_avg = mean of the Hold-Out and ACD gaps. Few-Shot is reported apart, never in
the averages. Rows a score run skipped or could not score (null values) are left out, and so
is an infinite value (each split counts those per column in `infinite_left_out`); means of
scores near 1e308 do not overflow, and the JSON holds null, never NaN or Infinity, for a value
that is undefined.
"""

from __future__ import annotations

import math
import posixpath
from dataclasses import asdict, dataclass, field
from typing import Any, Mapping, Sequence

from scoring.display_names import quoted, quoted_list
from scoring.errors import InputError
from scoring.job_output import SHARD
from scoring.schema import is_data_file

AVERAGED = ("original", "holdout", "acd")
ATTR_PREFIX = "attr:"
ACC_PREFIX = "attribute_accuracy_"


def _mean(values) -> float | None:
    """Mean of the finite values (None when there is none), without overflow near 1e308
    (`meta_eval.numbers`); a null, NaN or infinite value is left out (`_nonfinite` counts the
    infinite ones a split leaves out)."""
    from meta_eval.numbers import finite_mean

    kept = [float(v) for v in values if v is not None]
    mean = finite_mean(kept) if kept else math.nan
    return mean if math.isfinite(mean) else None


def _nonfinite(part, columns) -> dict[str, int]:
    """Per column, the rows of `part` whose value is infinite (left out of every mean, counted)."""
    import numpy as np

    out = {}
    for col in columns:
        if col in part:
            n = int(np.isinf(part[col].to_numpy(dtype=float)).sum())
            if n:
                out[col] = n
    return out


def _gap(a_i: float | None, a_c: float | None) -> float | None:
    return (a_i - a_c) / a_i if a_i and a_c is not None else None


@dataclass
class ProtocolRow:
    dataset: str
    protocol: str
    splits: int
    A_iid: float | None
    A_comp: float | None
    gap: float | None
    P_iid: float | None
    P_comp: float | None
    per_split: list[dict[str, Any]] = field(default_factory=list)


def side_accuracy(frame, mask, aspects: Sequence[str]) -> tuple[float | None, dict[str, float | None]]:
    """A over the masked rows: the mean over aspects of each aspect's mean accuracy."""
    part = frame[mask]
    per = {a: _mean(part[ACC_PREFIX + a].tolist()) if ACC_PREFIX + a in part else None for a in aspects}
    return _mean(per.values()), per


def _splits_aspects(splits_json: Mapping[str, Any]) -> list:
    signature = splits_json.get("signature") or {}
    return list(splits_json.get("aspects") or signature.get("aspects") or splits_json["splits"][0]["seen"][0])


def check_splits_json(data: Any) -> None:
    """Raise `ValueError` naming the first key that is not as `ctgscore splits` writes it: an
    object whose `splits` is a non-empty list of objects, each with `seen` and `unseen` lists
    of combinations (objects holding a string or number for every aspect). Any other shape
    would fail the table with a bare exception, or count a combination on no side."""
    if not isinstance(data, Mapping):
        raise ValueError(f"expected a JSON object, got {type(data).__name__}")
    signature = data.get("signature")
    if signature is not None and not isinstance(signature, Mapping):
        raise ValueError("'signature' is not an object")
    splits = data.get("splits")
    if not isinstance(splits, list) or not splits or not all(isinstance(split, Mapping) for split in splits):
        raise ValueError("'splits' must be a non-empty list of objects")
    first = splits[0].get("seen")
    if not (data.get("aspects") or (signature or {}).get("aspects")) and not (isinstance(first, list) and first):
        raise ValueError("no aspects: neither 'aspects' nor a combination in 'splits[0].seen'")
    if not isinstance(first, list) or not all(isinstance(c, Mapping) for c in first):
        raise ValueError("'splits[0].seen' must be a list of combinations (objects)")
    aspects = _splits_aspects(data)
    if not aspects or not all(isinstance(a, str) for a in aspects):
        raise ValueError("the aspects must be named by strings")
    for index, split in enumerate(splits):
        for side in ("seen", "unseen"):
            combos = split.get(side)
            if not isinstance(combos, list):
                raise ValueError(f"'splits[{index}].{side}' must be a list of combinations")
            for number, combo in enumerate(combos):
                where = f"'splits[{index}].{side}[{number}]'"
                if not isinstance(combo, Mapping):
                    raise ValueError(f"{where} is not an object")
                for aspect in aspects:
                    value = combo.get(aspect)
                    if isinstance(value, bool) or not isinstance(value, (str, int, float)) \
                            or (isinstance(value, float) and not math.isfinite(value)):
                        raise ValueError(f"{where}: aspect {quoted(aspect)} must be a string or a number, got {quoted(value, 40)}")


def protocol_row(frame, dataset: str, splits_json: Mapping[str, Any]) -> ProtocolRow:
    """One dataset's protocol: per split A_i, A_c, G, perplexity, and their protocol values
    (`splits_json` checked by `check_splits_json`)."""
    try:
        check_splits_json(splits_json)
    except ValueError as exc:
        raise ValueError(f"dataset {quoted(dataset)}: splits JSON: {exc}") from None
    signature = splits_json.get("signature") or {}
    aspects = _splits_aspects(splits_json)
    missing = [a for a in aspects if ATTR_PREFIX + a not in frame]
    if missing:
        raise ValueError(f"dataset {quoted(dataset)}: no attribute values for aspect(s) {quoted_list(missing)} "
                         "in the scored rows")
    keys = list(zip(*(frame[ATTR_PREFIX + a].tolist() for a in aspects))) if len(frame) else []
    per_split = []
    for index, split in enumerate(splits_json["splits"]):
        seen = {tuple(str(c[a]) for a in aspects) for c in split["seen"]}
        unseen = {tuple(str(c[a]) for a in aspects) for c in split["unseen"]}
        is_seen = [tuple(map(str, k)) in seen for k in keys]
        is_unseen = [tuple(map(str, k)) in unseen for k in keys]
        a_i, per_i = side_accuracy(frame, is_seen, aspects)
        a_c, per_c = side_accuracy(frame, is_unseen, aspects)
        ppl = frame["perplexity"] if "perplexity" in frame else None
        per_split.append({
            "split": index, "divergence": split.get("divergence"), "rows_iid": sum(is_seen), "rows_comp": sum(is_unseen),
            "A_iid": a_i, "A_comp": a_c, "gap": _gap(a_i, a_c), "accuracy_per_aspect_iid": per_i,
            "accuracy_per_aspect_comp": per_c,
            "P_iid": _mean(ppl[is_seen].tolist()) if ppl is not None else None,
            "P_comp": _mean(ppl[is_unseen].tolist()) if ppl is not None else None,
            "infinite_left_out": _nonfinite(frame[[a or b for a, b in zip(is_seen, is_unseen)]],
                                            [ACC_PREFIX + a for a in aspects] + ["perplexity"]),
        })
    a_i = _mean(s["A_iid"] for s in per_split)
    a_c = _mean(s["A_comp"] for s in per_split)
    return ProtocolRow(dataset, str(signature.get("protocol") or "unknown"), len(per_split), a_i, a_c, _gap(a_i, a_c),
                       _mean(s["P_iid"] for s in per_split), _mean(s["P_comp"] for s in per_split), per_split)


def averages(rows: Sequence[ProtocolRow]) -> dict[str, float | None]:
    """Table 1's averages over Original, Hold-Out and ACD (Few-Shot apart; module docstring)."""
    by = {row.protocol: row for row in rows}
    a_values, p_values, gaps = [], [], []
    if "original" in by:
        a_values.append(by["original"].A_iid)
        p_values.append(by["original"].P_iid)
    for protocol in ("holdout", "acd"):
        if protocol in by:
            a_values += [by[protocol].A_iid, by[protocol].A_comp]
            p_values += [by[protocol].P_iid, by[protocol].P_comp]
            gaps.append(by[protocol].gap)
    return {"A_avg": _mean(a_values), "P_avg": _mean(p_values), "G_avg": _mean(gaps)}


def results_table(frame, splits: Sequence[tuple[str, Mapping[str, Any]]], source: str = "the scores",
                  earlier=None) -> dict[str, Any]:
    """The results table as JSON-ready data: per dataset, its protocol rows, averages and the
    accuracy per attribute combination, and `rows`, where every row of the frame went
    (`row_account`; `source` names the scores there), after `earlier` (`scored_rows`' account of
    the rows that never reached the frame) when given.
    `splits` pairs a dataset name (rows with that `dataset`, or all rows when the frame has
    no dataset column) with a splits JSON."""
    datasets: dict[str, list[ProtocolRow]] = {}
    combinations: dict[str, list[dict[str, Any]]] = {}
    for dataset, splits_json in splits:
        part = (frame[frame["dataset"] == dataset] if "dataset" in frame else frame).reset_index(drop=True)
        row = protocol_row(part, dataset, splits_json)
        datasets.setdefault(dataset, []).append(row)
        if dataset not in combinations and "attribute_accuracy" in part:
            aspects = list(row.per_split[0]["accuracy_per_aspect_iid"]) if row.per_split else []
            combinations[dataset] = per_combination(part, aspects) if aspects else []
    out = {}
    for dataset, rows in datasets.items():
        few = [asdict(r) for r in rows if r.protocol == "fewshot"]
        out[dataset] = {"protocols": [asdict(r) for r in rows if r.protocol != "fewshot"], "fewshot": few,
                        "average": averages([r for r in rows if r.protocol in AVERAGED]),
                        "per_combination": combinations.get(dataset, [])}
    rows = row_account(frame, splits, source)
    return {"datasets": out, "rows": (earlier.then(rows) if earlier is not None else rows).as_dict()}


NO_DATASET_SPLITS = "dataset not given --splits"
NO_ATTRIBUTES = "no attributes in the dump"
NO_SPLIT = "combination in no split"


def row_account(frame, splits: Sequence[tuple[str, Mapping[str, Any]]], source: str = "the scores"):
    """Every scored row used, or left out under its first reason (docs/meta_eval.md, "Rows left
    out"; `meta_eval.row_account`): `no dataset` (a missing key, when other rows have one), a
    dataset no `--splits` names, no attributes in the dump for an aspect of its splits (an id
    the dump does not have), a combination on no side of any split of its dataset. The first
    row of each reason is named by its id. A used row is on some side of some split; a null or
    infinite score then leaves it out of that score's means only (`infinite_left_out`)."""
    import numpy as np

    from meta_eval.row_account import account, missing_mask, no_key

    rows = len(frame)
    by_dataset: dict[str, list] = {}
    for dataset, splits_json in splits:
        aspects = _splits_aspects(splits_json)
        sides = {tuple(str(c[a]) for a in aspects) for split in splits_json["splits"] for side in ("seen", "unseen")
                 for c in split[side]}
        by_dataset.setdefault(dataset, []).append((aspects, sides))
    if "dataset" in frame:
        no_dataset = missing_mask(frame["dataset"])
        keys = [None if gone else str(value) for value, gone in zip(frame["dataset"].tolist(), no_dataset)]
    else:
        no_dataset = np.zeros(rows, bool)
        keys = [None] * rows
    everything = [entry for entries in by_dataset.values() for entry in entries]
    columns = {a: frame[ATTR_PREFIX + a].tolist() for entries in by_dataset.values() for aspects, _ in entries
               for a in aspects if ATTR_PREFIX + a in frame}
    unnamed, no_attributes, no_split = (np.zeros(rows, bool) for _ in range(3))
    for row, key in enumerate(keys):
        if no_dataset[row]:
            continue
        entries = by_dataset.get(key) if key is not None else everything
        if not entries:
            unnamed[row] = True
            continue
        combos = []
        for aspects, sides in entries:
            values = [columns[a][row] if a in columns else None for a in aspects]
            if not any(missing_mask(values)):
                combos.append(tuple(str(v) for v in values) in sides)
        if not combos:
            no_attributes[row] = True
        elif not any(combos):
            no_split[row] = True
    checks = [(no_key("dataset"), no_dataset), (NO_DATASET_SPLITS, unnamed), (NO_ATTRIBUTES, no_attributes),
              (NO_SPLIT, no_split)]
    ids = frame["id"].tolist() if "id" in frame else None

    def where(reason, hit):
        row = int(hit[0])
        return f"{source}: " + (f"id {quoted(ids[row])}" if ids is not None else f"row {row}")

    return account(rows, checks, where)[1]


def per_combination(frame, aspects: Sequence[str]) -> list[dict[str, Any]]:
    """Mean `attribute_accuracy` and rows per attribute combination (CompMCTG's breakdown)."""
    columns = [ATTR_PREFIX + a for a in aspects]
    usable = frame.dropna(subset=["attribute_accuracy"])
    out = []
    for key, group in usable.groupby(columns, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        out.append({"combination": dict(zip(aspects, key)), "rows": len(group),
                    "accuracy": float(group["attribute_accuracy"].mean())})
    return out


def scored_frame(dump: str, scores, storage_options: Mapping[str, Any] | None = None):
    """`scored_rows`' frame (the rows left out because a key is not valid UTF-8 are counted there)."""
    return scored_rows(dump, scores, storage_options)[0]


def splits_aspects(splits: Sequence[tuple[str, Mapping[str, Any]]]) -> set[str]:
    """The aspects the (dataset, splits JSON) pairs read: the only `attr:` columns the table needs."""
    return {str(aspect) for _, splits_json in splits for aspect in _splits_aspects(splits_json)}


def scored_rows(dump: str, scores, storage_options: Mapping[str, Any] | None = None, source: str = "scores",
                aspects: set[str] | None = None, row_files=None):
    """Stored scores (a DataFrame in `ctgscore.load_scores` layout, one row per id) joined by
    id with the dump's attribute combinations, one `attr:<aspect>` column per aspect (of
    `aspects` only, when given: a dump whose rows each name another aspect would otherwise
    make a column per row, rows x rows cells), and the
    account of the score rows (`meta_eval.row_account.RowAccount`). Where an id repeats across
    the dump's shards the scores have a `shard` column (each row's shard: its path under the
    dump without `.parquet`), and the join is on id and shard.

    A row whose key is not valid UTF-8 is left out, counted and its first row named (docs/
    meta_eval.md, "Rows left out"): a score row whose `dataset` or `id` is (`load_scores` gives
    such a key as its bytes), and the score row of a dump row whose `attributes` (an aspect's
    name or value) is; a dump row whose id is not UTF-8 matches no score. A Parquet `binary` id
    reads as the text it holds. The first score row of a reason is named by the file it was
    stored in and its row there when `row_files` (`meta_eval.io.RowFiles`, from
    `ctgscore.scores.load_scores_placed`) says where the scores were stored, else by `source`
    and its row in `scores`; the first of the dump's by its dump file and row."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    from meta_eval.row_account import account, unreadable_reason, unreadable_where
    from scoring.attribute_accuracy import row_attributes
    from scoring.parquet_read import read_parquet_here
    from scoring.s3_filesystem import url_to_fs
    from scoring.utf8_text import binary_as_text, unreadable_counts, unreadable_mask

    fs, root = url_to_fs(str(dump), storage_options)
    files = sorted(p for p in fs.find(root) if is_data_file(p)) if fs.isdir(root) else [root]
    by_shard = SHARD in scores.columns
    base = posixpath.dirname(root.rstrip("/")) if not fs.isdir(root) else root.rstrip("/")
    keys = ["id", SHARD] if by_shard else ["id"]
    records, dump_left_out, dump_first = [], {}, {}  # (id[, shard]) of a dump row left out -> its reason
    for name in files:
        with fs.open(name, "rb") as handle:
            table = read_parquet_here(handle, columns=["id", "attributes"])
        shard = {SHARD: name[len(base) + 1:].removesuffix(".parquet")} if by_shard else {}  # as written, as the job
        table = table.set_column(0, "id", binary_as_text(table.column("id")))
        unreadable = [(column, bad) for column in ("id", "attributes")
                      for bad in [unreadable_mask(table.column(column))] if bad is not None]
        if unreadable:
            bad_id = dict(unreadable).get("id", np.zeros(table.num_rows, bool))
            ids = table.column("id").filter(pa.array(~bad_id)).to_pylist()
            for row_id, bad in zip(ids, dict(unreadable).get("attributes", np.zeros(table.num_rows, bool))[~bad_id]):
                if bad:  # its score row is left out (a dump row whose id is not UTF-8 names no score row)
                    dump_left_out[(row_id, *shard.values())] = unreadable_reason("attributes")
            for reason, where in unreadable_counts(table.num_rows, unreadable, name).first.items():
                dump_first.setdefault(reason, where)
            table = table.filter(pa.array(~np.logical_or.reduce([bad for _, bad in unreadable])))
        for row in _rows(table, name):
            found = {ATTR_PREFIX + k: str(v) for k, v in row_attributes(row).items() if aspects is None or k in aspects}
            records.append({"id": row["id"], **shard, **found})
    attributes = pd.DataFrame.from_records(records, columns=None if records else keys)
    if by_shard:
        unknown = sorted(set(scores[SHARD]) - set(attributes[SHARD]))
        if unknown:
            raise InputError(f"{dump}: no shard {quoted(unknown[0])} of the scores under it (give the job's input folder)")
    twice = attributes.duplicated(keys)
    if twice.any():  # a merge would give the score row once per dump row: counted twice, or crossed
        repeated = attributes.loc[twice, "id"].iloc[0]
        where = f"twice in shard {quoted(attributes.loc[twice, SHARD].iloc[0])} of it" if by_shard else (
            "in more than one of its rows, and the scores have no 'shard' column to tell them apart "
            "(read all the runs of the job that scored this dump)")
        raise InputError(f"{dump}: id {quoted(repeated)} is {where}")
    checks, column_of = [], {}
    for column in ("dataset", "id"):  # load_scores gives a key that is not UTF-8 as its bytes
        if column in scores:
            checks.append((unreadable_reason(column), np.fromiter((isinstance(v, bytes) for v in scores[column]),
                                                                  bool, len(scores))))
            column_of[unreadable_reason(column)] = column
    if dump_left_out:
        key_of = zip(*(scores[k] for k in keys))
        checks.append((unreadable_reason("attributes"), np.fromiter((k in dump_left_out for k in key_of), bool, len(scores))))

    def where(reason, hit):  # a score row where it was stored; a dump row's attributes in the dump
        if reason not in column_of:
            return dump_first[reason]
        column = column_of[reason]
        if row_files is not None:
            return row_files.where(scores, column, hit, source)
        return unreadable_where(source, column, int(hit[0]), scores["id"].iloc if column != "id" else None)

    keep, rows = account(len(scores), checks, where)
    frame = scores.loc[keep].reset_index(drop=True) if not keep.all() else scores
    return frame.merge(attributes, on=keys, how="left"), rows


def _rows(table, name: str) -> list[dict]:
    """The (id, attributes) rows of one dump file; a value that is no text (invalid UTF-8) fails
    the file naming the row and the field."""
    from scoring.utf8_text import table_rows

    return table_rows(table, lambda row, field: InputError(f"{name}: row {row}: field {field!r} is not valid UTF-8"))


def markdown_section(table: Mapping[str, Any]) -> str:
    """The report section: per dataset, one row per protocol, then the averages."""
    from scoring.display_names import cut_note
    from scoring.tables import MISSING, markdown_name, markdown_table

    def fmt(value, percent=True):
        if value is None or not math.isfinite(value):
            return MISSING
        return f"{100 * value:.2f}" if percent else f"{value:.2f}"

    def pct(value):
        return fmt(value)

    def num(value):
        return fmt(value, False)

    lines = ["## CompMCTG results", "",
             "Attribute accuracy on the in-distribution (A_i) and compositional (A_c) test combinations, the "
             "compositional gap G = (A_i − A_c) / A_i and perplexity; averages over Original, Hold-Out and ACD "
             "(Few-Shot apart).", ""]
    for dataset, data in table["datasets"].items():  # the dataset and the splits file's protocol are text
        lines += [f"### {markdown_name(dataset)}", "", markdown_table(
            ["protocol", "splits", "A_i (%)", "A_c (%)", "G (%)", "PPL i.d.", "PPL comp"],
            [[row["protocol"], row["splits"], row["A_iid"], row["A_comp"], row["gap"], row["P_iid"], row["P_comp"]]
             for row in data["protocols"] + data["fewshot"]],
            formats=[None, None, pct, pct, pct, num, num]).rstrip("\n")]
        avg = data["average"]
        lines += ["", f"Average: A_avg {fmt(avg['A_avg'])} %, G_avg {fmt(avg['G_avg'])} %, P_avg {fmt(avg['P_avg'], False)}.", ""]
    account = table.get("rows")
    if account and account["rows_left_out"]:
        from meta_eval.row_account import RowAccount
        from scoring.tables import markdown_text

        line = RowAccount(account["rows_in"], account["rows_used"], account["rows_left_out"],
                          account.get("rows_left_out_first", {})).line()
        lines += [f"**Rows {markdown_text(line)}.**", ""]
    text = "\n".join(lines)
    return text + cut_note(text, "The JSON table beside this file")
