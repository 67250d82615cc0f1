"""What every subcommand shares: the common flags, `--params`/`--param` parsing, output checks,
the error-rate rule and the final summary (text, or one JSON object with `--json`).

The conventions are described in docs/cli.md.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
from typing import Any, Iterable, Mapping

from scoring import atomic_files
from scoring.console_text import LINE_LIMIT
from scoring.errors import StorageError, UsageError

#: default `--max-error-rate` of `ctgscore score` (the job config's `max_error_rate` default too)
DEFAULT_MAX_ERROR_RATE = 0.1


def common_flags() -> argparse.ArgumentParser:
    """Flags accepted by every subcommand (after its name) and by `ctgscore` itself."""
    parent = argparse.ArgumentParser(add_help=False)
    group = parent.add_argument_group("common options")
    group.add_argument("--json", action="store_true", default=argparse.SUPPRESS,
                       help="print one JSON summary on stdout instead of text")
    group.add_argument("--no-progress", action="store_true", default=argparse.SUPPRESS,
                       help="no progress bars: print only the final summary")
    group.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show the Python traceback of an error")
    return parent


def flag(args: argparse.Namespace, name: str) -> bool:
    return bool(getattr(args, name, False))


def progress_enabled(args: argparse.Namespace) -> bool:
    """Detail lines in the summary: off under --no-progress and --json."""
    return not (flag(args, "no_progress") or flag(args, "json"))


def progress_bars(args: argparse.Namespace) -> bool:
    """Progress bars: only on a terminal (a redirected log gets no cursor codes), never under
    --no-progress or --json."""
    import sys

    return progress_enabled(args) and sys.stderr.isatty()


def cpus(text: str) -> float:
    """argparse type of `--num-cpus`: a finite number > 0 (`nan` or `inf` reached Ray, which
    then failed to start after half a minute)."""
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a finite number of CPUs > 0")
    return value


# ----- parameters -------------------------------------------------------------------------
def add_param_options(parser: argparse.ArgumentParser, what: str = "metric") -> None:
    parser.add_argument("--params", metavar="JSON|@FILE", default=None,
                        help=f"{what} parameters as a JSON object, or @file (JSON or YAML)")
    parser.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                        help=f"one {what} parameter (value read as YAML: 2, true, [s_h, f]); repeatable, "
                             "applied after --params")


def _yaml_value(text: str, source: str = "--param") -> Any:
    """A `KEY=VALUE` value read as YAML (`scoring.config_yaml`); text that is no YAML stays text."""
    from scoring import config_yaml

    try:
        return config_yaml.load(text, source)
    except config_yaml.YamlSyntaxError:
        return text


def load_params_value(value: str | None, flag_name: str = "--params") -> dict[str, Any]:
    """`--params`: an inline JSON (or YAML flow) object, or `@path` to a JSON/YAML file. A job
    config metric entry (`{name: ..., params: {...}}`) is accepted too; its `params` are used."""
    from scoring import config_yaml

    if value is None or value.strip() == "":
        return {}
    if value.startswith("@"):
        path = pathlib.Path(value[1:])
        from scoring.local_files import refuse_device

        refuse_device(path, f"{flag_name} ")
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise UsageError(f"{flag_name}: {path}: no such file") from None
        except UnicodeDecodeError:
            raise UsageError(f"{flag_name}: {path}: not UTF-8 text") from None
        source = str(path)
    else:
        text, source = value, flag_name
    try:
        loaded = config_yaml.load(text, source)  # YAML 1.2 flow syntax covers JSON objects
    except config_yaml.YamlSyntaxError as exc:
        raise UsageError(str(exc).replace("not valid YAML", "not valid JSON or YAML", 1)) from None
    if loaded is None:
        return {}
    if isinstance(loaded, dict) and set(loaded) <= {"name", "label", "params"} and isinstance(loaded.get("params"), dict):
        loaded = loaded["params"]
    if not isinstance(loaded, dict):
        raise UsageError(f"{source}: expected an object of parameters, got {type(loaded).__name__}")
    return {str(k): v for k, v in loaded.items()}


def parse_assignments(pairs: Iterable[str], flag_name: str) -> dict[str, str]:
    """`KEY=VALUE` strings -> {KEY: VALUE} (values left as text)."""
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"{flag_name} {pair!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


def collect_params(args: argparse.Namespace) -> dict[str, Any]:
    """`--params` then every `--param KEY=VALUE` (values parsed as YAML scalars/flow)."""
    params = load_params_value(getattr(args, "params", None))
    for key, value in parse_assignments(getattr(args, "param", []) or [], "--param").items():
        params[key] = _yaml_value(value, f"--param {key}")
    return params


def build_metric(name: str, params: dict[str, Any]):
    """`scoring.registry.build_metric`, with a model that cannot be loaded (an `OSError` from
    the loader, e.g. a hub id offline) reported as a `StorageError` naming the metric and model."""
    from scoring.errors import CtgscoreError
    from scoring.registry import build_metric as build

    try:
        return build(name, params)
    except CtgscoreError:
        raise
    except OSError as exc:
        model = params.get("model") or _default_model(name)
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise StorageError(f"metric {name!r}: cannot load model {model!r}: {reason}") from exc


def _default_model(name: str) -> str:
    """The `model` default of a metric's constructor (what an unnamed model means), for errors."""
    from scoring.registry import describe_metric

    try:
        for param in describe_metric(name).params:
            if param.name == "model" and not param.required:
                return str(param.default)
    except Exception:  # noqa: BLE001 - only an error message is at stake
        pass
    return "(its default)"


# ----- paths ------------------------------------------------------------------------------
def _probe_dir(folder: pathlib.Path, for_what: str) -> None:
    probe = folder / f".ctgscore-probe-{os.getpid()}"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise StorageError(f"{for_what} {folder}: cannot write there ({exc.strerror or exc})") from None


def check_output_file(path: str, what: str = "output") -> pathlib.Path:
    """An output file's folder must exist and be writable; checked before any work."""
    if "://" in path:
        raise UsageError(f"{what} {path}: only local paths are supported here")
    target = pathlib.Path(path)
    if target.is_dir():
        raise UsageError(f"{what} {path}: is a folder, expected a file name")
    folder = target.parent
    if not folder.exists():
        raise StorageError(f"{what} {path}: folder {folder} does not exist")
    if not folder.is_dir():
        raise StorageError(f"{what} {path}: {folder} is not a folder")
    _probe_dir(folder, f"{what} folder")
    return target


def prepare_output_dir(path: str, what: str = "output folder") -> pathlib.Path:
    """An output folder is created when missing (with its parents) and must be writable."""
    if "://" in path:
        raise UsageError(f"{what} {path}: only local paths are supported here")
    folder = pathlib.Path(path)
    if folder.exists() and not folder.is_dir():
        raise StorageError(f"{what} {path}: exists and is not a folder")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(f"{what} {path}: cannot create it ({exc.strerror or exc})") from None
    _probe_dir(folder, what)
    return folder


def write_parquet_atomic(table, path: pathlib.Path) -> None:
    """Write a Parquet file under a hidden temp name in the same folder, then rename it into
    place (`scoring.atomic_files`): an interrupted run leaves no half-written output."""
    import pyarrow.parquet as pq

    atomic_files.write_with(path, lambda handle: pq.write_table(table, handle))


def check_input_path(path: str, what: str = "input") -> None:
    """A local input must exist (s3:// inputs are checked where they are read). A path that is
    not there is a mistake in the command line: a usage error (exit 2)."""
    if "://" not in path and not os.path.exists(path):
        raise UsageError(f"{what} {path}: no such file or folder")


def check_not_input(output: str, input_path: str, what: str = "output") -> None:
    """An output that is the input file itself, or lies inside the input folder, is a usage
    error (exit 2), refused before anything is written (symlinks resolved)."""
    if "://" in output or "://" in input_path:
        return
    target, source = os.path.realpath(output), os.path.realpath(input_path)
    if target == source or target.startswith(source.rstrip(os.sep) + os.sep):
        where = "is the input" if target == source else "is inside the input folder"
        raise UsageError(f"{what} {output} {where} {input_path}: choose another {what} (the input must stay as it is)")


# ----- input limits -----------------------------------------------------------------------
def add_limit_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--input-limit", action="append", default=[], metavar="NAME=VALUE", dest="input_limit",
        help="raise or lower an input cap (repeatable): max_cell_bytes, max_references, max_json_depth, "
             "max_inflation; docs/schema.md, 'Input limits'",
    )


def limits_from(args: argparse.Namespace):
    """(`scoring.limits.RowLimits`, max_inflation) from `--input-limit NAME=VALUE` flags."""
    from scoring.limits import MAX_INFLATION, RowLimits

    values: dict[str, Any] = {}
    for item in getattr(args, "input_limit", None) or []:
        name, sep, raw = item.partition("=")
        value = _yaml_value(raw, f"--input-limit {name.strip()}")
        if not sep or not name.strip():
            raise UsageError(f"--input-limit {item!r}: expected NAME=VALUE")
        values[name.strip()] = value
    inflation = values.pop("max_inflation", MAX_INFLATION)
    if isinstance(inflation, bool) or not isinstance(inflation, (int, float)) or not 1 <= inflation < float("inf"):
        raise UsageError(f"--input-limit max_inflation={inflation!r}: expected a finite number >= 1")
    try:
        limits = RowLimits.from_mapping(values)
    except UsageError as exc:
        raise UsageError(f"--input-limit: {exc}") from None
    return limits, float(inflation)


# ----- error rate -------------------------------------------------------------------------
def add_error_rate_option(parser: argparse.ArgumentParser, default: float | None, where: str) -> None:
    parser.add_argument(
        "--max-error-rate", type=float, default=default, metavar="R",
        help=f"exit with code 1 when more than this fraction of rows have an error ({where})",
    )


def check_rate(value: float | None) -> None:
    from scoring.error_rate import is_fraction

    if value is not None and not is_fraction(value):
        raise UsageError(f"--max-error-rate {value}: expected a fraction between 0 and 1")


def error_rate_message(label: str, errors: int, rows: int, limit: float | None) -> str | None:
    """The failure message when `errors` of `rows` exceed the fraction `limit`, else None."""
    from scoring.error_rate import exceeds

    if not exceeds(errors, rows, limit):
        return None
    return f"{label}: {errors} of {rows} rows have an error ({errors / rows:.1%} > max error rate {limit:g})"


def error_reasons(table) -> dict[str, int]:
    """Reason -> number of rows, most frequent first, from an output table's `error` column."""
    import pyarrow.compute as pc

    counts = pc.value_counts(table.column("error").drop_null()).to_pylist()
    return {item["values"]: item["counts"] for item in sorted(counts, key=lambda item: -item["counts"])}


#: the longest row-error reason a summary line shows (a longer one keeps its head and tail)
REASON_LIMIT = 500


def reason_lines(reasons: Mapping[str, int], per_run: int = 3) -> list[str]:
    from scoring.console_text import console_text

    top = list(reasons.items())[:per_run]
    return ["  errors: " + "; ".join(f"{count} x {console_text(reason, REASON_LIMIT)}" for reason, count in top)] if top else []


# ----- summary ----------------------------------------------------------------------------
def emit(args: argparse.Namespace, summary: Mapping[str, Any], text: str | Iterable[str],
         limit: int | None = LINE_LIMIT) -> None:
    """The final summary: `text` for people, or `summary` as one JSON line with `--json`.

    Each item of `text` is one console line (`scoring.console_text.console_line`: URLs redacted,
    controls, bidi and invisible characters shown as escapes, a newline inside an item
    included, cut at `LINE_LIMIT` unless `limit` says otherwise: None for a document printed
    whole); the JSON escapes the same characters (`console_json`)."""
    from scoring.console_text import console_json, console_line
    from scoring.redact import redact_values

    if flag(args, "json"):
        # a value JSON cannot write as it is (a set, a path) is redacted as `default` writes it
        print(console_json(json.dumps(redact_values(summary), default=lambda value: redact_values(_json_default(value)),
                                      ensure_ascii=False)))
    else:
        lines = [text] if isinstance(text, str) else list(text)
        for line in lines:
            print(console_line(line, limit))
    sys.stdout.flush()



def error_line(message: object) -> str:
    """`message` as the text of an `error: ...` line: one line (`scoring.errors.one_line`:
    whitespace runs as one space, URLs redacted), then the console rule (`console_line`)."""
    from scoring.console_text import console_line
    from scoring.errors import one_line

    return console_line(one_line(message))


def print_error(message: object) -> str:
    """Print `error: <message>` on stderr (`error_line`); returns the line's text."""
    line = error_line(message)
    print(f"error: {line}", file=sys.stderr)
    return line


def print_traceback() -> None:
    """`--debug`: the current exception's traceback on stderr, each line by the console rule
    (an exception message carries data strings too)."""
    import traceback

    from scoring.console_text import console_lines

    for line in console_lines(traceback.format_exc().rstrip("\n")):
        print(line, file=sys.stderr)


def _json_default(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (set, tuple)):
        return list(value)
    if isinstance(value, pathlib.PurePath):
        return str(value)
    return str(value)


def check_lower_is_better(lower_is_better, columns, what: str = "compared") -> None:
    """Refuse (exit 2) a `--lower-is-better` column that is not among `columns`, the ones
    compared: silently accepted, a misspelt name would rank a column the wrong way round."""
    from scoring.display_names import quoted, quoted_list

    known = set(columns)
    unknown = [name for name in dict.fromkeys(lower_is_better) if name not in known]
    if unknown:
        more = f" (and {len(unknown) - 1:,} more)" if len(unknown) > 1 else ""
        raise UsageError(f"--lower-is-better: column {quoted(unknown[0])}{more} is not one of the {what} "
                         f"columns ({quoted_list(columns)})")
