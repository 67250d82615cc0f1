"""The *unit* of work of the score stage: one row range `[start, stop)` of one input shard
(at most `part_rows` rows), read once and passed through every metric that needs it.

A unit travels through Ray Data as one row whose `UNIT` column holds its descriptor (JSON):
the shard (uri, rel, etag, size, version), the range, the columns to read, the labels of the
metrics that score it and, per label, the shard's earlier parts (its row cache), and the labels
whose part is written staged (`staged_units`). Each stage parses it once (`unit_of`)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ray_jobs.job import layout

UNIT = "_unit"


def build_units(plans, carried_of) -> list[dict[str, str]]:
    """One unit per distinct (shard, start, stop) to score, listing the metrics that need it
    and, per metric, the shard's earlier parts. `carried_of(columns)` names the carried
    columns of a shard with those columns (read along for the output)."""
    units: dict[tuple[str, int, int], dict[str, Any]] = {}
    for plan in plans:
        label = plan.metric.label
        for rel, shard_plan in plan.shards.items():
            shard = shard_plan.shard
            staged = staged_units(shard_plan)
            for start, stop in shard_plan.units:
                unit = units.get((rel, start, stop))
                if unit is None:
                    unit = units[(rel, start, stop)] = {
                        "uri": shard.info.uri, "rel": rel, "etag": shard.info.etag, "size": shard.info.size,
                        "version": shard.version, "rows": shard.num_rows, "schema": columns_digest(shard.columns),
                        "start": start, "stop": stop, "columns": [], "labels": [],
                        "previous": {}, "staged": [], "_shard_columns": shard.columns,
                    }
                unit["labels"].append(label)
                if (start, stop) in staged:
                    unit["staged"].append(label)
                unit["previous"][label] = shard_plan.previous
                wanted = [c for c in plan.metric.read_columns if c in shard.columns]
                unit["columns"] = list(dict.fromkeys(unit["columns"] + wanted))
    descriptors = []
    for unit in units.values():
        carried = carried_of(unit.pop("_shard_columns"))
        unit["columns"] = list(dict.fromkeys(["id", *unit["columns"], *carried]))
        descriptors.append({UNIT: json.dumps(unit)})
    return descriptors


def staged_units(shard_plan) -> set[tuple[int, int]]:
    """The units of a shard (`plan.ShardPlan`) whose part name its folder already holds (a part
    of another signature, or an incomplete one: an unchanged shard scored again): written under
    staged names, so the folder keeps its parts as they were until the commit finds the shard
    covered (`layout.staged_part_uri`)."""
    names = {uri.rsplit("/", 1)[-1] for uri in shard_plan.existing}
    version = shard_plan.shard.version
    return {(start, stop) for start, stop in shard_plan.units if layout.PartName(start, stop, version).filename() in names}


def unit_of(text: str) -> dict[str, Any]:
    """A unit's descriptor from its `UNIT` column value."""
    return json.loads(text)


def where(unit: dict[str, Any]) -> str:
    """The unit named for a message: its shard and row range."""
    return f"{unit['rel']} rows {unit['start']}-{unit['stop']}"


def columns_digest(columns: dict[str, str]) -> str:
    """A short digest of a shard's column types (`plan.Shard.columns`), which each unit carries
    so the worker can tell the file it reads from the one the plan saw."""
    return hashlib.sha256(json.dumps(columns, sort_keys=True).encode()).hexdigest()[:16]
