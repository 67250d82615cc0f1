"""`ctgscore leaderboard JOB.yaml`: one leaderboard refresh. Runs the scoring job of the config
(incremental: only new or changed rows are scored), then compares the systems on its output
(`ctgscore compare`, partial sums read file by file) and writes, under `-o DIR`:

    DIR/board.html         the leaderboard page, with what moved since the previous refresh
    DIR/leaderboard.json   comparisons and leaderboard (the next refresh's `previous`)
    DIR/history/<UTC time>.json and DIR/history.jsonl   every refresh kept, one summary line each

    ctgscore leaderboard examples/sample_local.yaml -o leaderboard/ --columns text_stats_words
    ray job submit --working-dir . -- python -m ctgscore leaderboard JOB.yaml -o /mnt/board
"""

from __future__ import annotations

import argparse
import datetime as dt
import json

from ctgscore.cli import common
from ctgscore.cli import compare as compare_cli
from ctgscore.cli import run as run_cli
from meta_eval.defaults import DEFAULT_RESAMPLES
from scoring.errors import InputError, UsageError


def register(subparsers, parent: argparse.ArgumentParser) -> None:
    parser = subparsers.add_parser(
        "leaderboard", parents=[parent], help="refresh a leaderboard: run the scoring job, then compare systems",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("config_path", nargs="?", metavar="JOB.yaml", help="job config")
    parser.add_argument("--config", dest="config_flag", metavar="JOB.yaml", help="job config (same as the positional)")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", dest="overrides",
                        help="override a job config key (as in `ctgscore run`); repeatable")
    parser.add_argument("-o", "--output", default="leaderboard", metavar="DIR",
                        help="folder for board.html, leaderboard.json and the history (default: leaderboard)")
    parser.add_argument("--columns", nargs="+", default=None, metavar="COLUMN",
                        help="score columns to rank on (default: every numeric score column)")
    parser.add_argument("--unit", default="doc_id", help="column that pairs rows across systems (default doc_id)")
    parser.add_argument("--lower-is-better", nargs="*", default=None, metavar="COLUMN",
                        help="columns where lower is better (default: perplexity columns)")
    parser.add_argument("--resamples", type=int, default=DEFAULT_RESAMPLES,
                        help=f"paired bootstrap resamples (default {DEFAULT_RESAMPLES}, as meta)")
    parser.add_argument("--trials", type=int, default=10000, help="approximate randomisation trials")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--alpha", type=float, default=0.05, help="significance level")
    parser.add_argument("--tasks", type=int, default=0, help="Ray tasks for the comparison (0 or 1: in this process)")
    parser.add_argument("--num-cpus", type=common.cpus, default=0.5, help="CPUs per Ray task")
    parser.set_defaults(handler=handle, prune=False, max_error_rate=None)


def _changes(comparisons, previous: dict | None, history: list[dict] = ()) -> list[str]:
    """One line per (dataset, column) naming new systems with their rank, moves and departures,
    and since when the leader has led (`history`: the refreshes so far, this one last)."""
    from meta_eval.report.history import leader_streaks
    from meta_eval.report.leaderboard import moves

    lines = []
    streaks = leader_streaks(list(history), [(c.dataset, c.column) for c in comparisons])
    for comp in comparisons:
        moved, gone = moves(comp, previous)
        ranks = {s.system: s.rank for s in comp.systems}
        leader = comp.systems[0]
        parts = [f"leader {leader.system} {leader.mean:.4g}"]
        if previous is not None:
            parts += [f"new {name} rank {ranks[name]}" for name, move in moved.items() if move == "new"]
            parts += [f"{name} {move} to {ranks[name]}" for name, move in moved.items() if move not in ("new", "=")]
            parts += [f"gone {name}" for name in gone]
        system, since, count = streaks.get((comp.dataset, comp.column), (None, None, 0))
        if system == leader.system and count > 1:
            parts.append(f"leader since {since} ({count} refreshes)")
        lines.append(f"  {comp.dataset} / {comp.column}: " + "; ".join(parts))
    return lines


def history_file(history, now: dt.datetime):
    """`history/<UTC time>.json` for this refresh; a second refresh within the same second gets
    `<UTC time>-2.json` rather than replacing the first one's file."""
    from scoring.file_names import FileNames

    names = FileNames(path.name for path in history.iterdir())
    return history / names.claim(now.strftime("%Y%m%dT%H%M%SZ"), ".json")


def handle(args: argparse.Namespace) -> int:
    if args.resamples < 1 or args.trials < 1 or args.tasks < 0:
        raise UsageError("--resamples and --trials must be >= 1 and --tasks >= 0")
    from meta_eval.defaults import check_counts

    check_counts(args.seed, "--seed", **{"--resamples": args.resamples, "--trials": args.trials})
    if not 0 < args.alpha < 1:
        raise UsageError(f"--alpha {args.alpha}: expected a number between 0 and 1")
    if args.columns is not None and args.lower_is_better is not None:  # before the job runs
        common.check_lower_is_better(args.lower_is_better, list(dict.fromkeys(args.columns)))
    out = common.prepare_output_dir(args.output)
    board_json = out / "leaderboard.json"
    previous = compare_cli.read_previous(str(board_json), "the previous refresh's board") \
        if board_json.exists() else None
    from meta_eval import compare
    from meta_eval.report.files import append_line, subfolder, write_text
    from ray_jobs import score_corpus

    config = score_corpus.load_config(run_cli.config_path(args), overrides=run_cli.overrides(args))
    manifest = score_corpus.run_job(config)
    problems = score_corpus.error_rate_exceeded(manifest)
    scores = manifest.get("output") or getattr(config, "output", None)
    options = dict(unit=args.unit, n_resamples=args.resamples, trials=args.trials, seed=args.seed, alpha=args.alpha)
    comparisons, skipped, columns, acc, _ = compare_cli.compare_scores(
        str(scores), args.columns, args.lower_is_better, options, args.tasks, args.num_cpus)
    if not comparisons:
        raise InputError(f"scores {scores}: nothing to compare ({skipped[0]})")
    now = dt.datetime.now(dt.timezone.utc)
    scored = {label: {"rows_scored": r.get("rows_scored"), "rows_cached": r.get("rows_cached")}
              for label, r in manifest.get("metrics", {}).items()}
    rows = acc.account
    document = compare.leaderboard_document(comparisons, refreshed=now.isoformat(timespec="seconds"),
                                            scores=str(scores), job=scored, rows=rows.as_dict())
    text = json.dumps(document, indent=1, allow_nan=False)
    from meta_eval.page_pairs import IN_LEADERBOARD

    write_text(out / "board.html", compare_cli.render(comparisons, "html", previous, rows, IN_LEADERBOARD))  # replaces a symlink
    write_text(board_json, text)
    history = subfolder(out, "history")
    write_text(history_file(history, now), text)
    from meta_eval.report.history import history_record, read_history

    record = history_record(comparisons, document["refreshed"], scored, acc.input_rows)
    log = out / "history.jsonl"
    known = {(c.dataset, c.column) for c in comparisons}
    earlier = read_history(log, known) if log.is_file() and not log.is_symlink() else []  # old lines read as well
    history = [r for r in earlier if "problem" not in r] + [record]
    append_line(log, json.dumps(record))
    rows_scored = sum(v["rows_scored"] or 0 for v in scored.values())
    rows_cached = sum(v["rows_cached"] or 0 for v in scored.values())
    summary = {"ok": not problems, "command": "leaderboard", "output": str(out), "page": str(out / "board.html"),
               "job": scored, "errors": problems, "previous": previous is not None, "skipped": skipped,
               "rows_in": rows.rows_in, "rows_used": rows.rows_used, "rows_left_out": dict(rows.left_out),
               **({"rows_left_out_first": dict(rows.first)} if rows.first else {}),
               "leaderboard": document["leaderboard"]}
    rows_in = (manifest.get("input") or {}).get("rows")
    per_metric = f", summed over {len(scored)} metrics of {rows_in} input rows" if len(scored) > 1 and rows_in else ""
    lines = [f"leaderboard: scored {rows_scored} new or changed rows ({rows_cached} reused{per_metric}); "
             f"{len(comparisons)} comparisons ({', '.join(columns)}) -> {out / 'board.html'}"]
    lines += _changes(comparisons, previous, history)
    lines += [f"  skipped: {reason}" for reason in skipped]
    lines += [f"  left out: {rows.line()}"] if rows.line() else []
    lines += [f"  history: {log} line {r['line']}: {r['problem']} (kept, not read)" for r in earlier if "problem" in r]
    lines += [f"  error: {problem}" for problem in problems]
    common.emit(args, summary, lines)
    return 1 if problems else 0
